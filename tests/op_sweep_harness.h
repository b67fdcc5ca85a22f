// The op sweep harness: runs one op's fast kernel (select_kernel + Instr) and its reference
// kernel on the same random inputs and compares. Every op in the table must be covered by at
// least one case; op_sweep_test.cc asserts that.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "core/base/fpe_flags.h"
#include "core/ir/convert.h"
#include "core/kernels/kernel.h"

namespace fjit::sweep {

// Ops exercised by some case; filled by cover() at static-initialisation time.
inline std::set<Op>& covered() {
  static std::set<Op> s;
  return s;
}
inline bool cover(std::initializer_list<Op> ops) {
  for (Op op : ops) covered().insert(op);
  return true;
}

enum class Domain { any, positive, unit, small_int, nonzero };

struct Case {
  Op op;
  Attrs attrs;
  ValueType out;
  std::vector<ValueType> ins;
  Domain domain = Domain::any;
  double tol = 1e-5;                 // relative tolerance (f32); f64 uses tol*1e-6
  std::vector<Array> explicit_ins;   // overrides random inputs where defined()
  RunContext* ctx = nullptr;
};

inline Array random_array(const ValueType& t, Domain d, std::mt19937& rng) {
  Array a(t.dtype, t.shape);
  std::uniform_real_distribution<double> uni(-2.0, 2.0);
  for (int64_t i = 0; i < a.size(); ++i) {
    double v = uni(rng);
    if (d == Domain::positive) v = std::abs(v) + 0.1;
    if (d == Domain::unit) v = std::abs(v) / 2.0;
    if (d == Domain::nonzero && std::abs(v) < 0.25) v = v < 0 ? -0.5 : 0.5;
    switch (t.dtype) {
      case DType::f32: a.data<float>()[i] = static_cast<float>(v); break;
      case DType::f64: a.data<double>()[i] = v; break;
      case DType::i32: {
        int32_t iv = static_cast<int32_t>(std::lround(v * 3));
        if (d == Domain::positive && iv <= 0) iv = 1 - iv;
        if (d == Domain::nonzero && iv == 0) iv = 1;
        a.data<int32_t>()[i] = iv;
        break;
      }
      case DType::boolean: a.data<uint8_t>()[i] = v > 0; break;
      case DType::u8: case DType::u32: case DType::f16: case DType::bf16:
        // Storage dtypes: every bit pattern of u8 and u32; half values of the float range.
        if (t.dtype == DType::u8) a.data<u8_t>()[i] = u8_t{static_cast<uint8_t>(rng())};
        else if (t.dtype == DType::u32) a.data<uint32_t>()[i] = static_cast<uint32_t>(rng());
        else set_element_from_double(t.dtype, a.raw(), i, v);
        break;
    }
  }
  return a;
}

inline bool all_finite(const std::vector<Array>& arrays) {
  for (const Array& a : arrays)
    if (a.dtype() == DType::f32 || a.dtype() == DType::f64)
      for (int64_t i = 0; i < a.size(); ++i)
        if (!std::isfinite(a.at_as_double(i))) return false;
  return true;
}

// Runs the case; returns the fast kernel's result after asserting it matches the reference.
inline Array run_case(const Case& c, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::vector<Array> ins;
  for (size_t i = 0; i < c.ins.size(); ++i) {
    if (i < c.explicit_ins.size() && c.explicit_ins[i].defined()) ins.push_back(c.explicit_ins[i]);
    else ins.push_back(random_array(c.ins[i], c.domain, rng));
  }
  Array expect = reference_eval(c.op, c.attrs, c.out, ins, c.ctx);

  Instr instr;
  instr.op = c.op;
  instr.attrs = c.attrs;
  instr.out = c.out;
  instr.ins = c.ins;
  std::vector<void*> bufs;
  for (size_t i = 0; i < ins.size(); ++i) {
    instr.in_bufs.push_back(static_cast<int>(i));
    bufs.push_back(ins[i].raw());
  }
  Array got(c.out.dtype, c.out.shape);
  instr.out_buf = static_cast<int>(bufs.size());
  bufs.push_back(got.raw());
  select_kernel(instr);
  RunContext default_ctx;
  Frame frame{bufs.data(), c.ctx ? c.ctx : &default_ctx};
  // Under the fpe check mode's eyes (checks/fpe_report.h): the CPU's exception flags of the
  // fast kernel, on this thread and fjit's intra-op workers.
  uint32_t flags = 0;
  {
    const fpe::ActiveRun active;
    (void)fpe::take_thread_flags();
    (void)fpe::take_worker_flags();
    instr.fn(instr, frame);
    flags = fpe::take_thread_flags() | fpe::take_worker_flags();
  }

  const std::string what = std::string(op_name(c.op)) + " " + type_str(c.out.dtype, c.out.shape);
  EXPECT_EQ(got.shape(), expect.shape()) << what;
  EXPECT_EQ(got.dtype(), expect.dtype()) << what;
  const double tol = c.out.dtype == DType::f64 ? c.tol * 1e-6 : c.tol;
  int reported = 0;
  for (int64_t i = 0; i < got.size() && reported < 5; ++i) {
    double g = got.at_as_double(i), e = expect.at_as_double(i);
    bool ok = (std::isnan(g) && std::isnan(e)) || g == e ||
              std::abs(g - e) <= tol * std::max(1.0, std::abs(e));
    if (!ok) {
      ADD_FAILURE() << what << " element " << i << ": fast " << g << " vs reference " << e;
      ++reported;
    }
  }
  // The fpe mode's first rule: a flag counts only with a non-finite value in the result. With
  // finite inputs and a finite reference result, that would be a false alarm.
  if (flags != 0 && all_finite(ins) && all_finite({expect})) {
    EXPECT_TRUE(all_finite({got})) << what << ": the fpe mode would report " << fpe::flag_names(flags)
                                   << " for finite inputs and a finite reference result";
  }
  return got;
}

}  // namespace fjit::sweep
