// The fusion planner's state and its steps (internal to core/compile/fusion/): one Planner
// walks an optimized graph once and forms the groups of fusion.h, one kind per file:
//   planner.cc         the driver (run, plan_fusion) and what every kind asks of the graph
//                      (consumers, outputs, where a group's instruction runs, update chains)
//   gemm_epilogue.cc   kGemm: matmul + scale + add as one blocked GEMM update, and the sum of
//                      the product's squares merged into it (merge_norm_sums)
//   reduce_update.cc   kReduceUpdate: a sum all-reduce + scale + add as one collective
//   copy_chain.cc      kCopy: a chain of layout ops as one pass over memory
//   elementwise.cc     kElementwise and kSum: DAGs of elementwise ops, multi-output
//   describe.cc        FusionPlan::describe, the plan dumps' text of a group
// The order is fixed: GEMM and all-reduce updates claim their nodes first, then copy chains
// (from the last node backwards, so a chain is taken whole from its end), then elementwise
// groups grow from the last node backwards, then GEMM updates absorb their norms' sums.
#pragma once

#include <vector>

#include "core/compile/fusion/fusion.h"

namespace fjit::fusion_internal {

class Planner {
 public:
  // REQUIRES: `live` from live_nodes(g). g, live and o outlive the planner.
  Planner(const Graph& g, const std::vector<bool>& live, const FusionOptions& o);

  // Forms the GEMM and all-reduce updates, then the elementwise and sum groups.
  void run();
  // A GEMM update whose product is also squared and summed (sum(dW * dW) of a gradient norm)
  // computes that sum too, from the product blocks it already holds in cache: dW is then not
  // written out at all unless something else reads it. REQUIRES: run() done.
  void merge_norm_sums();

  FusionPlan plan;

 private:
  // --- planner.cc: facts about the graph every kind uses.
  // For a reduce_sum `id` over trailing axes of its operand (not all of them): the number of
  // elements each output element sums; else 0.
  int64_t summed_row(int id) const;
  // `id`'s only consumer, when it has exactly one and is not an output.
  int sole_consumer(int id) const;
  // The result consumer of `id` when it has exactly one and is not an output: check helpers
  // are not counted, so the answer is the same with checks on and off.
  int sole_result_consumer(int id) const;
  // Whether `id`'s value is needed outside `members` (sorted; an output, or a live consumer
  // that is not a member and whose group does not compute `id` again): then a group computing
  // it must write it out.
  bool read_outside(int id, const std::vector<int>& members) const;
  // Where the instruction that reads `c` runs: a GEMM or all-reduce update at the earliest of
  // its results, anything else at c or later (an elementwise group at its root).
  int runs_at(int c) const;
  void add_group(FusionGroup grp);

  // The update chain after x: c = x * alpha (alpha a scalar constant, or with runtime_alpha a
  // scalar computed before x, read when the step runs), then maybe root = addend +- c. Decided
  // on result consumers only (sole_result_consumer), so the same with checks on and off.
  struct UpdateChain {
    int c = -1, root = -1, addend = -1, alpha_node = -1;
    double alpha = 1;
  };
  UpdateChain update_chain(int x, bool runtime_alpha) const;

  // --- gemm_epilogue.cc
  void try_gemm(int m);
  // --- reduce_update.cc
  void try_reduce_update(int r);
  // --- copy_chain.cc
  void try_copy(int root);
  // --- elementwise.cc
  bool fusable(int id) const;
  bool writable_extra(int p, int runs, const std::vector<bool>& in_group) const;
  bool recomputable(int p, const Shape& shape, const std::vector<bool>& in_group, int budget,
                    std::vector<int>& chain, std::vector<int>& anchors) const;
  void try_elementwise(int root, int sum, bool multi_output);

  const Graph& g_;
  const std::vector<bool>& live_;
  const FusionOptions& opt_;
  std::vector<std::vector<int>> consumers_;  // distinct live consumers, in graph order
  std::vector<bool> output_;
  // Reaches an output or a collective, not only checks: with checks off, the same nodes exist.
  std::vector<bool> feeds_result_;
};

}  // namespace fjit::fusion_internal
