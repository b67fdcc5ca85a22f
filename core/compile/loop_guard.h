// Internal: how a running while_loop stops when it would never end (core/trace/control_flow.h,
// WhileOptions). The while_loop's kernel asks once per iteration, after cond_fn said go on and
// before body_fn runs: one compare with the trip limit, and, when the step has a deadline
// (RunContext::deadline_ns), one read of the monotonic clock. When the answer is stop, the
// guard raises the loop's check site (Region::trip_site or timeout_site) with the iteration
// reached and the number of non-finite values in the carry, and the loop ends there with that
// carry: the step then finishes and reports it like any other check, on every replica, through
// the step-check handler's all-reduce of the flags (checks/step_check_handler.h).
//
// Replicas: each replica's loop stops by its own trip count or clock, so a replica waiting in a
// collective for one stuck in a loop is released once that loop stops. A while_loop whose body
// itself holds a collective must stop at the same iteration on every replica: a trip limit
// does that (the trip count is the same); for the deadline, such a loop all-reduces each
// replica's "past the deadline" bit before each iteration (while_deadline_stops), so all stop
// together, and those told by another replica stop their step too (RunContext::stopped).
// That costs one small all-reduce per iteration, only under a deadline and only for loops
// whose plans hold a collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/ir/region.h"
#include "core/kernels/kernel.h"

namespace fjit {

// Whether the while_loop of `region` must stop before running body_fn for iteration `i` (the
// body has run i times). When it must and the plan records checks, raises the guard's site in
// ctx (trip limit first). `carry` holds the carry leaves of `types`.
// Before cond_fn runs for iteration `i`: whether the step's deadline stops the loop now (the
// step is then stopped: RunContext::stopped). With `agree`, every replica of ctx.comm takes
// part and all get the same answer. False when the loop has no timeout site.
bool while_deadline_stops(const Region& region, RunContext& ctx, bool agree);

// After cond_fn said go on: whether the trip limit, or a stopped step, stops the loop.
bool while_guard_stops(const Region& region, RunContext& ctx, int64_t i,
                       std::span<const std::byte* const> carry, std::span<const ValueType> types);

}  // namespace fjit
