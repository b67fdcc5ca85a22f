// compile(): traced Graph -> optimized Graph -> Executable (instructions, kernels, buffers).
//
// The pass pipeline is fixed and ordered: algebraic simplification, constant folding,
// simplification again, dead-code elimination. Lowering then fuses groups of nodes into single
// instructions (core/compile/fusion/fusion.h) and plans the arena (core/compile/memory_plan.h).
// With CompileOptions::dump_dir set (jit sets it from FJIT_DUMP_DIR), the graph before and
// after the passes is written as .txt and .dot and the plan as .plan.txt, named <name>.<n>.*.
//
// The compiler reads no environment: everything it is told comes in CompileOptions, and what
// decides how the plan runs (overlap, fusion) is recorded in the Executable.
#pragma once

#include <memory>
#include <string>

#include "core/compile/executable.h"

namespace fjit {

struct CompileOptions {
  std::string name = "fn";
  std::string dump_dir;  // empty: no dumps
  bool verify = true;    // run the verifier before and after the passes
  Fusion fusion = Fusion::all;  // which fused instructions to form (Fusion, executable.h)
  // The automatic-checks pass first in the pipeline (CheckMode::all): checks for NaN/Inf,
  // division by zero, indices and domains, with their sites appended to the plan's.
  bool automatic_checks = false;
  // The fpe check mode (CheckMode::fpe, checks/fpe_report.h): one site of kind fpe appended
  // to the plan's (Executable::fpe_site), raised by the run from the CPU's exception flags.
  bool fpe_checks = false;
  // Steps run under a deadline (JitOptions::step_timeout_s) and record checks: one site of
  // kind step_timeout appended to the plan's (Executable::deadline_site).
  bool step_deadline = false;
  // Not off: each all-reduce is placed as soon as its operands exist and marked for the
  // collective worker (core/compile/schedule.h). Values do not change, only when they are
  // computed. Recorded in Executable::overlap, which tells the runner whether to give the
  // plan a collective worker (worker) or to run it all on its own thread (schedule).
  Overlap overlap = Overlap::off;
  // Each all-gather of a plan input (ZeRO stage 3's parameter shards) but the first starts
  // ahead of its first reader and is marked for the collective worker (core/compile/schedule.h).
  bool gather_prefetch = false;
};

std::shared_ptr<const Executable> compile(const Graph& traced, std::vector<CheckSite> sites,
                                          const CompileOptions& options = {});

// The optimized graph alone (for tests and dumps). With `sites`, the pipeline starts with the
// automatic-checks pass, which adds check nodes and renumbers *sites in plan order.
Graph optimize(const Graph& traced, bool verify = true, std::vector<CheckSite>* sites = nullptr);

}  // namespace fjit
