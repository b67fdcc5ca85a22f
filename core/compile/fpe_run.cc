// Executable::run_fpe: the plan run of the fpe check mode (CheckMode::fpe; the rules are in
// checks/fpe_report.h).
#include <cmath>

#include "core/base/activity.h"
#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/compile/executable.h"

namespace fjit {
namespace {

struct NonFinite {
  int64_t count = 0;
  int64_t first = -1;
};

template <class T>
NonFinite scan(const T* p, int64_t n) {
  NonFinite r;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) {
      if (r.count++ == 0) r.first = i;
    }
  return r;
}

NonFinite non_finite(const ValueType& t, const void* p) {
  if (p == nullptr) return {};
  switch (t.dtype) {
    case DType::f32: return scan(static_cast<const float*>(p), t.size());
    case DType::f64: return scan(static_cast<const double*>(p), t.size());
    default: return {};
  }
}

}  // namespace

void Executable::run_fpe(const Frame& frame, void* const* outputs, const ActivityLevel& level) const {
  const fpe::ActiveRun active;
  (void)fpe::take_thread_flags();  // whatever ran before this plan is not its
  (void)fpe::take_worker_flags();
  // The first instruction that raised a watched flag and left a non-finite value in its result.
  int candidate = -1;
  uint32_t candidate_flags = 0;
  NonFinite candidate_bad;
  // Under a step deadline, as run_deadline (core/compile/executable.h).
  RunContext& ctx = *frame.ctx;
  const bool deadline = ctx.deadline_site >= 0;
  const ThreadStepDeadline polled(deadline ? ctx.deadline_ns : thread_step_deadline());
  const size_t n = instrs.size();
  for (size_t i = 0; i < n; ++i) {
    const Instr& instr = instrs[i];
    level.at(static_cast<int32_t>(i));
    seam_before(instr, ctx);
    if (!deadline || runs_under_deadline(ctx, i)) instr.fn(instr, frame);
    if (deadline) after_under_deadline(ctx, static_cast<int32_t>(i));
    if (candidate >= 0 || ctx.stopped) continue;  // a stopped step's values are garbage
    const uint32_t flags = fpe::take_thread_flags() | fpe::take_worker_flags();
    if (flags == 0) [[likely]] continue;
    const NonFinite bad = instr.out_buf >= 0 ? non_finite(instr.out, frame.bufs[instr.out_buf]) : NonFinite{};
    if (bad.count == 0) continue;  // raised, but nothing non-finite came out of it: benign
    candidate = static_cast<int>(i);
    candidate_flags = flags;
    candidate_bad = bad;
  }
  if (candidate < 0 || ctx.stopped || frame.ctx->flags == nullptr) [[likely]] return;
  // Reported only when a non-finite value reached the step's results: a value a later select
  // discarded (x/0 where the denominator is 0, a masked row) is no error.
  bool reached = false;
  for (size_t k = 0; k < output_types.size() && !reached; ++k)
    reached = non_finite(output_types[k], outputs[k]).count > 0;
  if (!reached || frame.ctx->flags[fpe_site]++ != 0 || frame.ctx->payload == nullptr) return;
  double* values = frame.ctx->payload + static_cast<size_t>(fpe_site) * kCheckPayloadSlots;
  values[0] = candidate;
  values[1] = candidate_flags;
  values[2] = static_cast<double>(candidate_bad.count);
  values[3] = static_cast<double>(candidate_bad.first);
}

}  // namespace fjit
