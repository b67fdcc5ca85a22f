// Fusion planning: which nodes of an optimized graph one instruction computes together.
//
// Unlike the graph passes (core/compile/passes/pass.h), fusion does not rewrite the graph: the optimized graph
// stays the one the user's ops made (checks and their upstream analysis read it), and the
// compiler lowers each group of this plan into one fused instruction (core/kernels/fused/fused.h).
//   elementwise  a DAG of elementwise ops (and broadcasts) with the shape of its root: one
//                pass over memory. Its intermediates are used only inside the group, except
//                members read after the group's instruction (at its root) or returned, which
//                it writes out too (extra_roots, multi-output fusion): Adam's new moments and
//                its new parameter come from one pass over parameter, gradient and moments.
//                A value an earlier group computed, read here, may be computed again here
//                from the materialized values it comes from instead (FusionOptions::recompute):
//                GELU's backward recomputes erf from the pre-activation rather than reading
//                three arrays that its forward pass would write for it.
//   sum          such a group (one op is enough) whose value only a full reduce_sum reads:
//                summed block by block, bit-identical to the unfused sum (sum(g*g) for a
//                global norm never writes the squares). Or one whose value only a
//                reduce_sum over trailing axes reads (a row sum: a norm's statistics and
//                backward sums): each row summed as the unfused row reduction sums it, and
//                members read outside written as further results, as for elementwise.
//   gemm         matmul followed by a scalar multiply, then optionally an add/sub of a value:
//                out = addend + alpha * A B as one blocked GEMM that applies the update to
//                each block of the product while it is in cache (the SGD update p - lr * dW),
//                rounding once, as fma(alpha, A B, addend). When something else reads the
//                product (a check, a returned gradient), the same instruction writes it out
//                too; when the product is also squared and summed (a global gradient norm),
//                it computes that sum as well (extra_roots): as the GEMM's panel kernel
//                stores the product when the depth fits one of its blocks (within rounding of
//                the unfused sum, in an order fixed by the shapes), else with the unfused
//                sum's rounding.
//                Which nodes form the update is decided on the consumers that reach an output
//                or a collective, never on check helpers, and the arithmetic is the same
//                whichever results are written: updated parameters are bit-identical with
//                checks off, on user checks and on all checks.
//   reduce_update  a sum all-reduce followed by the same kind of update (the SGD step on a
//                data-parallel gradient, p - lr * psum(g)): one collective that applies the
//                update to each block of the sum as it is reduced, fma(alpha, sum, addend),
//                on every replica (select_reduce_update). Formed, like gemm, on result
//                consumers only; the sum is written too when something else reads it.
//   copy         a chain of layout ops (reshape, transpose, slice, a concat of such at the top)
//                with maybe one f32 -> bf16 cast among them, or a `+ 0` over the whole (the
//                sum of slice adjoints, padded_sums.cc): one pass that reads each element
//                where the chain starts and writes it where the chain ends, converted as the
//                cast or the add would (core/kernels/fused/copy_group.h). Attention's heads
//                cut from one projection, cast and transposed are one pass each instead of
//                three, and their cotangents are put back into one buffer in one pass. Only
//                members that the chain alone reads join it; the others run on their own.
// Otherwise nothing is fused across a node with effects (check, collective): such a node is
// never a member, and a value it reads is never an intermediate, so it stays materialized and
// every check still reads the value of the op that produced it. Graph outputs are never
// intermediates either.
//
// The planner is split by kind of group, one file each, in core/compile/fusion/ (planner.h
// lists them); the compiler calls plan_fusion after the passes and before the schedule.
#pragma once

#include <vector>

#include "core/ir/graph.h"
#include "core/kernels/fused/fused.h"

namespace fjit {

struct FusionGroup {
  enum Kind { kElementwise, kSum, kGemm, kReduceUpdate, kCopy };
  Kind kind = kElementwise;
  int root = -1;                 // the node whose value the instruction writes
  std::vector<int> members;      // every node it computes, in graph order, root last
  std::vector<int> inputs;       // external operand node ids, in the instruction's operand order
  std::vector<FusedOp> program;  // kElementwise
  int product = -1;              // kGemm: the matmul node; kReduceUpdate: the all-reduce
  GemmUpdateForm form;           // kGemm: what the instruction reads and writes besides A, B
  // kElementwise, kSum: elementwise nodes the program computes again from values that are
  // materialized anyway, instead of reading them (sorted; not members: another instruction
  // computes them too, and need not write them for this group).
  std::vector<int> recomputed;
  // Further results the instruction writes, each through one more buffer after its operands,
  // in this order. kGemm, kReduceUpdate: the product (the reduced sum) when it is read outside
  // the group, then the sum of its squares (kGemm); the instruction runs at the earliest of
  // root and these. kElementwise, kSum (row sums): members read after root or returned, in
  // graph order; the instruction runs at root.
  std::vector<int> extra_roots;
  // The instruction with its kernel already selected (fn, prepared state); the compiler adds
  // buffers and the node id.
  Instr instr;
};

struct FusionPlan {
  std::vector<int> group_of;  // node id -> index into groups, or -1 when computed alone
  std::vector<FusionGroup> groups;
  // "fused[...]" text for a group, for plan dumps; "fused[...][compiled: adamw]" when the
  // instruction runs a compiled program (compiled_fused_name).
  std::string describe(int group) const;
};

struct FusionOptions {
  bool elementwise = true;
  bool gemm_epilogue = true;
  bool copy_chains = true;  // kCopy groups
  // Elementwise groups may write members that are read outside the group, or are outputs,
  // as further results (at most max_extra_results of them).
  bool multi_output = true;
  int max_members = 24;
  int max_extra_results = 6;
  // An elementwise group computes again, rather than reads, a value that an earlier group
  // computed when that value is a short chain (at most max_recompute nodes) of elementwise ops
  // over materialized values, with at most one of the group's shape among them, and nothing
  // but elementwise ops reads it: the earlier group then need not write it, nor the arena keep
  // it from the forward pass to the backward pass (an activation's intermediates).
  bool recompute = true;
  int max_recompute = 8;
};

// REQUIRES: `live` from live_nodes(g). Parameters and constants are never members.
FusionPlan plan_fusion(const Graph& g, const std::vector<bool>& live,
                       const FusionOptions& options = {});

}  // namespace fjit
