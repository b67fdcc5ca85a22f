// compile(): traced Graph -> optimized Graph -> Executable (instructions, kernels, buffers).
//
// The pass pipeline is fixed and ordered: algebraic simplification, constant folding,
// simplification again, dead-code elimination. Lowering then fuses groups of nodes into single
// instructions (core/compile/passes/fusion.h) and plans the arena (core/compile/memory_plan.h). With
// FJIT_DUMP_DIR set (or
// CompileOptions::dump_dir), the graph before and after the passes is written as .txt and .dot
// and the plan as .plan.txt, named <name>.<n>.*.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/compile/executable.h"

namespace fjit {

struct CompileOptions {
  std::string name = "fn";
  std::string dump_dir;  // empty: FJIT_DUMP_DIR, if set
  bool verify = true;    // run the verifier before and after the passes
  bool fuse = true;      // fused instructions (core/compile/passes/fusion.h); FJIT_FUSION=0
                         // turns off, FJIT_FUSION=elementwise or =gemm keeps one kind,
                         // FJIT_FUSION=single keeps elementwise groups to one result
  // The automatic-checks pass first in the pipeline (CheckMode::all): checks for NaN/Inf,
  // division by zero, indices and domains, with their sites appended to the plan's.
  bool automatic_checks = false;
  // Each all-reduce is placed as soon as its operands exist and marked for the collective
  // worker (core/compile/schedule.h). Unset: FJIT_OVERLAP is not off. Values do not change,
  // only when they are computed.
  std::optional<bool> overlap_collectives;
};

// How a step's all-reduces overlap the rest of its plan (core/compile/schedule.h).
enum class Overlap : uint8_t {
  off,       // graph order: the gradients are reduced after the backward pass
  schedule,  // each all-reduce placed as soon as its gradients exist, run on the plan's thread
  worker,    // the same order, each all-reduce run on the replica's collective worker thread
             // while the plan goes on (under MPI only when MPI allows it, mpi_runtime.h;
             // otherwise as schedule)
};

// FJIT_OVERLAP: unset, empty or "0": off; "schedule"; "1" or "worker"; anything else throws
// std::invalid_argument naming the variable.
Overlap overlap_from_env();

std::shared_ptr<const Executable> compile(const Graph& traced, std::vector<CheckSite> sites,
                                          const CompileOptions& options = {});

// The optimized graph alone (for tests and dumps). With `sites`, the pipeline starts with the
// automatic-checks pass, which adds check nodes and renumbers *sites in plan order.
Graph optimize(const Graph& traced, bool verify = true, std::vector<CheckSite>* sites = nullptr);

}  // namespace fjit
