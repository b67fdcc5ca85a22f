#include "core/compile/loop_guard.h"

#include <cmath>

#include "core/base/metrics.h"
#include "core/kernels/collective/communicator.h"
#include "core/ir/convert.h"

namespace fjit {
namespace {

double non_finite(std::span<const std::byte* const> carry, std::span<const ValueType> types) {
  int64_t bad = 0;
  for (size_t k = 0; k < carry.size() && k < types.size(); ++k) {
    if (!is_floating(types[k].dtype)) continue;
    const int64_t n = types[k].size();
    for (int64_t e = 0; e < n; ++e)
      bad += std::isfinite(element_as_double(types[k].dtype, carry[k], e)) ? 0 : 1;
  }
  return static_cast<double>(bad);
}

[[gnu::cold, gnu::noinline]] void raise(int site, double limit, RunContext& ctx, int64_t i,
                                        std::span<const std::byte* const> carry,
                                        std::span<const ValueType> types) {
  if (site < 0 || ctx.flags == nullptr || ctx.flags[site]++ != 0 || ctx.payload == nullptr) return;
  double* values = ctx.payload + static_cast<size_t>(site) * kCheckPayloadSlots;
  values[0] = limit;
  values[1] = non_finite(carry, types);
  values[kIterationSlot] = static_cast<double>(i + 1);
}

}  // namespace

bool while_guard_stops(const Region& region, RunContext& ctx, int64_t i,
                       std::span<const std::byte* const> carry, std::span<const ValueType> types) {
  if (region.trip_site >= 0 && i >= region.max_trips) {
    raise(region.trip_site, static_cast<double>(region.max_trips), ctx, i, carry, types);
    return true;
  }
  return false;
}

bool replicas_stop_together(RunContext& ctx) {
  bool stop = step_past_deadline(ctx);
  if (ctx.comm != nullptr && ctx.num_replicas > 1) {
    int32_t any = stop ? 1 : 0;
    ctx.comm->all_reduce(&any, 1, DType::i32, ReduceOp::max);
    if (any != 0) ctx.stopped = stop = true;
  }
  return stop;
}

bool while_deadline_stops(const Region& region, RunContext& ctx, bool agree, int64_t i,
                          std::span<const std::byte* const> carry, std::span<const ValueType> types) {
  if (region.timeout_site < 0 || ctx.deadline_ns == 0) return false;
  const bool stop = agree ? replicas_stop_together(ctx) : step_past_deadline(ctx);
  if (stop) raise(region.timeout_site, static_cast<double>(ctx.timeout_ns) / 1e9, ctx, i, carry, types);
  return stop;
}

}  // namespace fjit
