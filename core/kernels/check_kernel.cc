// The check instruction: raises flag `site` when its predicate is false and, on the first
// raise in a step, records up to kMaxCheckValues scalar values for the report. Its value (the
// predicate) is also written out so the instruction has a defined result.
#include "core/kernels/families.h"

namespace fjit::kernels {
namespace {

double load_as_double(const void* p, DType t) {
  switch (t) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::f64: return *static_cast<const double*>(p);
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::boolean: return *static_cast<const uint8_t*>(p);
  }
  return 0;
}

void check_kernel(const Instr& in, const Frame& f) {
  const uint8_t ok = *in.in<uint8_t>(f, 0);
  *in.output<uint8_t>(f) = ok;
  if (ok || !f.ctx->flags) return;
  const int64_t site = in.attrs.index;
  if (f.ctx->flags[site]++ == 0 && f.ctx->payload) {
    double* values = f.ctx->payload + site * kMaxCheckValues;
    const int n = std::min<int>(static_cast<int>(in.in_bufs.size()) - 1, kMaxCheckValues);
    for (int k = 0; k < n; ++k) values[k] = load_as_double(f.bufs[in.in_bufs[k + 1]], in.ins[k + 1].dtype);
  }
}
}  // namespace

bool select_check(Instr& instr) {
  if (instr.op != Op::Check) return false;
  instr.fn = check_kernel;
  return true;
}

}  // namespace fjit::kernels
