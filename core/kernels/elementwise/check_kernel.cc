// The check instruction: raises flag `site` when its predicate is false and, on the first
// raise in a step, records up to kMaxCheckValues values for the report: a user check's
// scalar values as they are, an automatic check's summary of the tensor it checks (see
// core/ir/check_payload.h), and the iteration of the loop it ran in. Its value (the
// predicate) is also written out so the instruction has a defined result. A passing check
// costs one load and one store; the rest is out of line.
#include <cmath>

#include "core/ir/check_payload.h"
#include "core/ir/convert.h"
#include "core/kernels/families.h"

namespace fjit::kernels {
namespace {

// One pass over the checked tensor; only runs on a failing step.
void summarize(CheckKind kind, double bound, const void* data, const ValueType& t, double* out) {
  using namespace check_payload;
  const int64_t n = t.size();
  double bad = 0, nans = 0;
  out[kFirstIndex] = -1;
  out[kFirstValue] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = element_as_double(t.dtype, data, i);
    if (!is_bad(kind, v, bound)) continue;
    if (bad == 0) {
      out[kFirstIndex] = static_cast<double>(i);
      out[kFirstValue] = v;
    }
    ++bad;
    nans += std::isnan(v) ? 1 : 0;
  }
  out[kBadCount] = bad;
  switch (check_kind_info(kind).detail) {
    case CheckDetail::kNanCount: out[kDetail] = nans; break;
    case CheckDetail::kElementCount: out[kDetail] = static_cast<double>(n); break;
    case CheckDetail::kBound: case CheckDetail::kNoDetail: out[kDetail] = bound; break;
  }
}

[[gnu::noinline, gnu::cold]] void raise(const Instr& in, const Frame& f) {
  const int64_t site = in.attrs.index;
  if (f.ctx->flags[site]++ != 0 || !f.ctx->payload) return;
  double* values = f.ctx->payload + site * kCheckPayloadSlots;
  values[kIterationSlot] = static_cast<double>(f.ctx->iteration + 1);
  const auto kind = static_cast<CheckKind>(in.attrs.axis);
  if (kind != CheckKind::user && in.in_bufs.size() >= 2) {
    summarize(kind, in.attrs.scalar, f.bufs[in.in_bufs[1]], in.ins[1], values);
    return;
  }
  const int n = std::min<int>(static_cast<int>(in.in_bufs.size()) - 1, kMaxCheckValues);
  for (int k = 0; k < n; ++k)
    values[k] = element_as_double(in.ins[k + 1].dtype, f.bufs[in.in_bufs[k + 1]], 0);
}

void check_kernel(const Instr& in, const Frame& f) {
  const uint8_t ok = *in.in<uint8_t>(f, 0);
  *in.output<uint8_t>(f) = ok;
  if (ok || !f.ctx->flags) [[likely]] return;
  raise(in, f);
}
}  // namespace

bool select_check(Instr& instr) {
  if (instr.op != Op::Check) return false;
  instr.fn = check_kernel;
  return true;
}

}  // namespace fjit::kernels
