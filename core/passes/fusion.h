// Fusion planning: which nodes of an optimized graph one instruction computes together.
//
// Unlike the graph passes in pass.h, fusion does not rewrite the graph: the optimized graph
// stays the one the user's ops made (checks and their upstream analysis read it), and the
// compiler lowers each group of this plan into one fused instruction (core/kernels/fused.h).
//   elementwise  a DAG of elementwise ops (and broadcasts) whose intermediates are used only
//                inside the group, with the shape of its root: one pass over memory.
//   sum          such a group (one op is enough) whose value only a full reduce_sum reads:
//                summed block by block, bit-identical to the unfused sum (sum(g*g) for a
//                global norm never writes the squares).
//   gemm         matmul followed by a scalar multiply, then optionally an add/sub of a value
//                the output can start from: out = addend + alpha * A B in one GEMM (the SGD
//                update p - lr * dW never materializes dW). It rounds once, as
//                fma(alpha, A B, addend) with A B the plain product; shapes where Eigen would
//                not are left unfused (select_gemm_epilogue).
//   update       the same update when the product, or its scaled value, is read elsewhere too
//                (a check on the gradient norm, automatic checks, a returned gradient): the
//                product is materialized by its own matmul and the update reads it, rounding
//                exactly as the epilogue does. So updated parameters are bit-identical with
//                checks on and off. Which nodes form an update is decided on the consumers
//                that reach an output or a collective, never on check helpers. When the
//                product is also squared and summed (a global norm), the update computes
//                that sum too, in the same pass over the product (extra_root below), with
//                the unfused sum's rounding.
// Nothing is fused across a node with effects (check, collective): such a node is never a
// member, and a value it reads is never an intermediate, so it stays materialized and every
// check still reads the value of the op that produced it. Graph outputs are never
// intermediates either.
#pragma once

#include <vector>

#include "core/graph.h"
#include "core/kernels/fused.h"

namespace fjit {

struct FusionGroup {
  enum Kind { kElementwise, kSum, kGemm, kUpdate };
  Kind kind = kElementwise;
  int root = -1;                 // the node whose value the instruction writes
  std::vector<int> members;      // every node it computes, in graph order, root last
  std::vector<int> inputs;       // external operand node ids, in the instruction's operand order
  std::vector<FusedOp> program;  // kElementwise
  // kUpdate: a second node it computes (a full sum of the product's squares), or -1. The
  // instruction then runs at the earlier of root and extra_root, and writes extra_root's
  // value through one more buffer after its operands.
  int extra_root = -1;
  // The instruction with its kernel already selected (fn, prepared state); the compiler adds
  // buffers and the node id.
  Instr instr;
};

struct FusionPlan {
  std::vector<int> group_of;  // node id -> index into groups, or -1 when computed alone
  std::vector<FusionGroup> groups;
  // "fused[...]" text for a group, for plan dumps.
  std::string describe(int group) const;
};

struct FusionOptions {
  bool elementwise = true;
  bool gemm_epilogue = true;
  int max_members = 24;
};

// REQUIRES: `live` from live_nodes(g). Parameters and constants are never members.
FusionPlan plan_fusion(const Graph& g, const std::vector<bool>& live,
                       const FusionOptions& options = {});

}  // namespace fjit
