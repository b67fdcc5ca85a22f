// Helpers for the fusion tests: random inputs, running a plan, the reference evaluation of a
// graph (reference kernels, node by node), and compiling a graph with and without fusion.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/compile/compiler.h"
#include "parallel/fjit.h"
#include "core/kernels/kernel.h"

namespace fjit::fusion_testing {

inline Array random_array(DType t, const Shape& s, std::mt19937& rng, double lo = -2, double hi = 2) {
  Array a(t, s);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < a.size(); ++i) {
    const double v = u(rng);
    switch (t) {
      case DType::f32:
        a.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::f64:
        a.data<double>()[i] = v;
        break;
      case DType::i32:
        a.data<int32_t>()[i] = static_cast<int32_t>(std::lround(v * 10));
        break;
      case DType::boolean:
        a.data<uint8_t>()[i] = v > 0;
        break;
      default:
        throw std::invalid_argument("random_array: no values for storage dtype " + std::string(dtype_name(t)));
    }
  }
  return a;
}

inline std::vector<Array> run(const Executable& exe, const std::vector<Array>& ins) {
  std::vector<Array> outs;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (const Array& a : ins) in_ptrs.push_back(a.raw());
  for (const ValueType& t : exe.output_types) {
    outs.emplace_back(t.dtype, t.shape);
    out_ptrs.push_back(outs.back().raw());
  }
  std::vector<std::byte> ws(exe.workspace_bytes() + 64);
  void* aligned =
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t{63});
  RunContext ctx;
  exe.run(in_ptrs.data(), out_ptrs.data(), ctx, aligned);
  return outs;
}

// Node-by-node reference evaluation of the optimized graph.
inline std::vector<Array> reference(const Graph& g, const std::vector<Array>& ins) {
  std::vector<Array> v(g.size());
  for (size_t k = 0; k < g.parameters.size(); ++k) v[g.parameters[k]] = ins[k];
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == Op::Parameter) continue;
    if (n.op == Op::Constant) {
      v[id] = n.attrs.value ? *n.attrs.value : Array::full(n.dtype, n.shape, n.attrs.scalar);
      continue;
    }
    std::vector<Array> args;
    for (int in : n.inputs) args.push_back(v[in]);
    v[id] = reference_eval(n.op, n.attrs, {n.dtype, n.shape}, args);
  }
  std::vector<Array> outs;
  for (int o : g.outputs) outs.push_back(v[o]);
  return outs;
}

inline double max_diff(const Array& a, const Array& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = a.at_as_double(i), y = b.at_as_double(i);
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return worst;
}

inline int count_label(const Executable& exe, const std::string& prefix) {
  int n = 0;
  for (const Instr& in : exe.instrs) n += in.label.rfind(prefix, 0) == 0;
  return n;
}

struct Compiled {
  std::shared_ptr<const Executable> fused, plain;
};
inline Compiled compile_both(const Graph& g) {
  CompileOptions o;
  o.name = "fusion_test";
  Compiled c;
  c.fused = compile(g, {}, o);
  o.fusion = Fusion::off;
  c.plain = compile(g, {}, o);
  return c;
}

// A chain over a full operand, a row vector, a column and a scalar, in float and double.
}  // namespace fjit::fusion_testing
