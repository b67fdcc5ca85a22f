// Internal: how a running while_loop stops when it would never end (core/trace/control_flow.h,
// WhileOptions). The while_loop's kernel asks once per iteration: after cond_fn ran, when the
// step has a deadline (RunContext::deadline_ns), one read of the monotonic clock; after cond_fn
// said go on and before body_fn runs, one compare with the trip limit. When the answer is stop, the
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
// whose plans hold a collective. A cond whose branches hold a collective does the same once
// before it picks a branch: once any replica stopped, every replica takes the first branch
// (running only its collectives), since a stopped replica's predicate may be stale.
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
// Whether the step of any replica of ctx.comm has stopped or passed its deadline (an
// all-reduce; every replica must call it at the same point): if so, this one's stops too.
bool replicas_stop_together(RunContext& ctx);

// After cond_fn ran for iteration `i`, before its answer is read: whether the step's deadline
// stops the loop now (the step is then stopped, RunContext::stopped, and the loop's timeout
// site raised). With `agree`, every replica of ctx.comm takes part and all get the same
// answer; a stopped replica's cond_fn answer may be stale, so it is read only when no replica
// stopped. False when the loop has no timeout site.
bool while_deadline_stops(const Region& region, RunContext& ctx, bool agree, int64_t i,
                          std::span<const std::byte* const> carry, std::span<const ValueType> types);

// After cond_fn said go on: whether the trip limit stops the loop.
bool while_guard_stops(const Region& region, RunContext& ctx, int64_t i,
                       std::span<const std::byte* const> carry, std::span<const ValueType> types);

}  // namespace fjit
