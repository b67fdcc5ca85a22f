// Plan order, and which collectives overlap the instructions after them.
//
// By default a plan runs its instructions in graph order: the order the step was traced in,
// where a data-parallel step reduces its gradients after the whole backward pass. One
// exception: an all-gather of a plan input (ZeRO stage 3's parameter shards) and the unfused
// instructions that read only it or each other (its unpadding slice and reshape) run just
// before the first other instruction that reads them, but not past the next collective in
// graph order (so the collectives keep the graph's order, which every replica shares whatever
// its plan fused): a gathered parameter is not alive from the step's start to its first use.
// And each such all-gather but the first is prefetched: it starts before the first reader of
// an earlier one (at least the previous one; as early as keeps the bytes gathered ahead within
// the largest all-gather's, and never before a collective that precedes it in graph order),
// runs on the replica's collective worker while the plan goes on (a top-level plan only, when
// the runner gives it a worker: core/runtime/jit_core.cc), and is waited for before its first
// reader; so the next layer's parameters are gathered while the current layer computes, and
// about two layers' gathered parameters are alive at once. Under MPI only when MPI allows it
// (mpi_runtime.h); otherwise the same order on the plan's thread.
// With overlap the gathers keep their place in the chain of collectives below. With
//  - Collectives, and control-flow instructions whose bodies hold collectives or checks, form
//    a chain in the order of their collectives in the graph: every replica meets the same
//    collectives in the same order, whatever each one's plan fused. The dict forms of psum and
//    pmean create their all-reduces in the order the gradients are computed, last layer first.
//  - The other instructions are list-scheduled: of those whose operands exist, the one that
//    leads to the earliest collective of the chain runs first (ties in graph order). So each
//    all-reduce starts as soon as the work it needs is done, the last layers' gradients are
//    reduced while the first layers' backward still runs. What leads to no collective (an
//    optimizer's update of the reduced gradients, checks) runs last, in the order of the
//    last collective each depends on: the update of the first gradient reduced runs first.
//  - Each overlapped instruction is waited for before the first later instruction that reads
//    or writes any buffer it writes, or that is itself a collective or control flow (those
//    run on the plan's thread), and at the end of the plan.
//
// Values are those of the plan without overlap, bit for bit: the same kernels run on the same
// data; only when they run changes.
#pragma once

#include <vector>

#include "core/compile/executable.h"
#include "core/compile/memory_plan.h"
#include "core/compile/fusion/fusion.h"
#include "core/ir/graph.h"

namespace fjit {

// The node ids at which the compiler lowers one instruction each, in plan order: live nodes
// other than parameters, constants, control results, and fused-group members other than the
// one the group's instruction is lowered at. With `gathers_ahead` (per node), the all-gathers of
// plan inputs are prefetched (above) and it is set to 1 at each; without it they are not.
std::vector<int> schedule_instructions(const Graph& g, const std::vector<bool>& live,
                                       const FusionPlan& fusion, bool overlap,
                                       std::vector<uint8_t>* gathers_ahead = nullptr);

// Whether the instruction lowered at `id` may run on the collective worker.
bool overlappable(const Graph& g, const FusionPlan& fusion, int id);

// For every instruction flagged in `async`, the index of the first later instruction that
// must wait for it (see above), or exe.instrs.size().
std::vector<int> overlap_waits(const Executable& exe, const std::vector<uint8_t>& async);

// Plans the arena of `planned` (the plan's intermediate values, in instruction order; value v
// lives in buffer planned_buf[v]) and fills exe's buffer offsets, arena sizes and, for the
// instructions flagged in `async`, exe.overlapped, exe.await_before and exe.num_overlapped.
// Until its wait the worker may still write an overlapped instruction's results and read its
// operands, so they keep their storage until then; the one exception is an operand the
// instruction works on in place, whose storage is its result's. Whether an operand is in place
// is the planner's choice, so planning repeats until every other operand outlives the wait
// (lifetimes only grow: it ends). Inputs an overlapped instruction reads count as read until
// its wait (Executable::can_alias).
void plan_arena(Executable& exe, const std::vector<uint8_t>& async,
                std::vector<PlannedValue>& planned, const std::vector<int>& planned_buf);

}  // namespace fjit
