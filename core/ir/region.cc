#include "core/ir/region.h"

#include <string>

#include "core/ir/shape_rules.h"

namespace fjit {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw ShapeRuleError(msg); }

ValueType param_type(const Graph& g, size_t k) {
  const Node& p = g.node(g.parameters[k]);
  return {p.dtype, p.shape};
}

void require_params(const Graph& g, std::span<const ValueType> ins, const char* what) {
  if (g.parameters.size() != ins.size())
    fail(std::string(what) + " takes " + std::to_string(g.parameters.size()) + " operands, got " +
         std::to_string(ins.size()));
  for (size_t k = 0; k < ins.size(); ++k) {
    const ValueType p = param_type(g, k);
    if (p.dtype != ins[k].dtype || p.shape != ins[k].shape)
      fail(std::string(what) + " operand " + std::to_string(k) + " is " +
           type_str(ins[k].dtype, ins[k].shape) + " but its parameter is " + type_str(p.dtype, p.shape));
  }
}

}  // namespace

void Region::finish() {
  has_effects = false;
  for (const auto& g : graphs) has_effects = has_effects || !g->effects.empty();
}

ValueType control_type(Op op, const Attrs& a, std::span<const ValueType> ins) {
  if (!a.region) fail("a control-flow op needs its region");
  const Region& r = *a.region;
  if (op == Op::Output) {
    if (a.index < 0 || a.index >= static_cast<int64_t>(r.outputs.size()))
      fail("output " + std::to_string(a.index) + " of " + std::to_string(r.outputs.size()) + " results");
    return r.outputs[a.index];
  }
  switch (op) {
    case Op::Scan: {
      if (r.graphs.size() != 1) fail("scan needs one body");
      std::vector<ValueType> params(ins.begin(), ins.end());
      for (int k = r.num_carry; k < r.num_carry + r.num_xs && k < static_cast<int>(params.size()); ++k) {
        Shape& s = params[k].shape;
        if (s.empty() || s[0] != r.length)
          fail("xs operand " + std::to_string(k - r.num_carry) + " " + type_str(params[k].dtype, s) +
               " does not have the leading extent " + std::to_string(r.length));
        s.erase(s.begin());
      }
      require_params(*r.graphs[0], params, "the body");
      break;
    }
    case Op::Cond:
      if (r.graphs.size() != 2) fail("cond needs two branches");
      if (ins.empty() || ins[0].dtype != DType::boolean || !ins[0].shape.empty())
        fail("cond needs a bool scalar predicate");
      require_params(*r.graphs[0], ins.subspan(1), "the true branch");
      require_params(*r.graphs[1], ins.subspan(1), "the false branch");
      break;
    case Op::CustomVjp:
      if (r.graphs.size() != 2) fail("custom_vjp needs fwd and bwd");
      require_params(*r.graphs[0], ins, "fwd");
      break;
    default: fail("not a control-flow op");
  }
  return {DType::boolean, {}};
}

}  // namespace fjit
