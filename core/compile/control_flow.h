// Internal: how the plan runs a control-flow op (core/ir/region.h).
//
// The compiler compiles each sub-graph of the op into an Executable of its own (the same
// passes and lowering as the enclosing plan) and makes one instruction of the op. Its buffers:
// the operands, then one per result (-1 when nothing reads it: the result is not written,
// unless the loop needs it), then one scratch buffer planned in the enclosing arena, live
// only during the instruction. The scratch holds the sub-plans' input and output tables, the
// loop's two carry buffers, slots for the results nobody reads (only those), and the
// sub-plans' workspace, so running allocates nothing.
//   scan        per iteration i (length-1 down to 0 when reversed): the body reads the carry
//               buffer, row i of each xs in place and the captured values, and writes the
//               other carry buffer and row i of each y; the stacked-carries result, when
//               read, gets the carry entering iteration i. RunContext::iteration is i while
//               the body runs, so a check raised in it records i.
//   cond        runs one branch's plan straight on the operands and results.
//   while_loop  per iteration i = 0, 1, ...: cond_fn's plan reads the carry buffer and writes
//               a flag in the scratch; while it is true, body_fn's plan writes the other carry
//               buffer. RunContext::iteration is i during both. The final carry is copied to
//               the results that are read.
//   custom_vjp  runs fwd's plan once.
//   remat       runs fn's plan once (its intermediate values live in the scratch).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/compile/executable.h"

namespace fjit {

struct ControlPlan {
  std::shared_ptr<const Region> region;
  std::vector<std::shared_ptr<const Executable>> plans;  // one per sub-graph that runs
  int num_inputs = 0;
  int num_results = 0;
  // Byte offsets into the scratch buffer.
  size_t in_table = 0, out_table = 0;     // void* tables for a sub-plan's run
  std::vector<size_t> carry[2];           // scan, while_loop: per carry leaf, the two carry buffers
  size_t flag = 0;                        // while_loop: cond_fn's result
  std::vector<size_t> sink;               // per sub-plan output: where it goes when unread
                                          // (unset for read results and loop carries)
  size_t workspace = 0;                   // the sub-plans' workspace
  size_t scratch_bytes = 0;
  std::vector<int64_t> row_bytes;         // scan: per input, bytes of one row of an xs leaf
  std::vector<int64_t> out_bytes;         // per sub-plan output, its bytes
};

// Compiles `n`'s sub-graphs with `compile_graph` and lays out its scratch; sets instr.fn and
// instr.prepared. `results[k]` is the node reading result k, or -1 when none does (only such
// results get a sink in the scratch). REQUIRES: n is a control-flow node other than output.
using GraphCompiler = std::function<std::shared_ptr<const Executable>(const Graph&)>;
void prepare_control(Instr& instr, const Node& n, const std::vector<int>& results,
                     const GraphCompiler& compile_graph);

}  // namespace fjit
