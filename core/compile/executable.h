// Executable: a compiled plan. A flat list of instructions over buffer slots, with every slot
// assigned before the first run, so running allocates nothing.
//
// An Executable is immutable after compile() and may be run from several threads at once (one
// plan serves every replica): each run passes its own workspace of workspace_bytes().
// It records how it runs (overlap mode, fusion), so that whoever runs it reads that from the
// plan, never from options of its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/ir/check_site.h"
#include "core/ir/graph.h"
#include "core/kernels/kernel.h"

namespace fjit {

class ActivityLevel;

// How a step's all-reduces overlap the rest of its plan (core/compile/schedule.h).
enum class Overlap : uint8_t {
  off,       // graph order: the gradients are reduced after the backward pass (ZeRO stage 3's
             // prefetched parameter gathers run on the collective worker, schedule.h)
  schedule,  // each all-reduce placed as soon as its gradients exist, run on the plan's thread
  worker,    // the same order, each all-reduce run on the replica's collective worker thread
             // while the plan goes on (under MPI only when MPI allows it, mpi_runtime.h;
             // otherwise as schedule)
};
const char* overlap_name(Overlap mode);  // "off", "schedule", "worker"

// Which fused instructions the compiler forms (core/compile/fusion/fusion.h); the values of
// FJIT_FUSION, in order: 1, 0, elementwise, gemm, single.
enum class Fusion : uint8_t {
  all,          // every kind
  off,          // none: one instruction per node
  elementwise,  // elementwise groups only
  gemm,         // GEMM and all-reduce updates only
  single,       // every kind, elementwise groups writing one result each
};
const char* fusion_name(Fusion fusion);  // "all", "off", "elementwise", "gemm", "single"

struct BufferRef {
  enum Kind : uint8_t { kInput, kOutput, kConstant, kArena };
  Kind kind;
  int64_t where = 0;               // input/output index, or arena byte offset
  const void* constant = nullptr;  // kConstant
};

class Executable {
 public:
  // Runs the plan. `inputs[i]` / `outputs[k]` point to caller-owned storage of input_types[i] /
  // output_types[k]; outputs must not overlap inputs. `workspace` is at least
  // workspace_bytes() bytes, 64-byte aligned. Check flags go to ctx.flags / ctx.payload when
  // num_check_sites() > 0 (the caller zeroes them before the run). A plan with overlapped
  // collectives runs them on ctx.worker when there is one, else in plan order on this thread;
  // either way they have all finished when run() returns or throws.
  void run(const void* const* inputs, void* const* outputs, RunContext& ctx, void* workspace) const;

  size_t workspace_bytes() const { return table_bytes_ + arena_bytes; }
  // Donation: true when output k may be written into input i's own storage, i.e. the plan
  // reads input i only before the instruction that writes output k, or in that instruction
  // as an operand it can update in place (same shape, elementwise, or a GEMM epilogue's
  // addend). The types must match too (the caller checks that).
  bool can_alias(int input, int output) const {
    const int w = output_writer[output];
    const int r = input_last_read[input];
    return w >= 0 && (r < w || (r == w && input_last_read_in_place[input]));
  }
  int num_check_sites() const { return static_cast<int>(check_sites.size()); }
  // The plan: a first line with its sizes, overlap mode and fusion, then one instruction per
  // line with its buffer assignment.
  std::string plan_string() const;

  std::shared_ptr<const Graph> graph;  // the optimized graph the plan computes
  std::vector<Instr> instrs;
  std::vector<BufferRef> buffers;
  std::vector<ValueType> input_types, output_types;
  std::vector<CheckSite> check_sites;  // indexed by site id (the check node's attrs.index)
  std::vector<std::shared_ptr<const Array>> constants;  // storage of constant buffers
  size_t arena_bytes = 0;              // intermediate values, after buffer reuse
  size_t min_live_bytes = 0;           // the largest set of values live at one time
  int64_t flops = 0;                   // matmul multiply-adds x2, for reports
  // For can_alias(): per output, the one instruction that writes it (-1: none); per input,
  // the last instruction that reads it (-1: none) and whether every read there is in place.
  std::vector<int> output_writer;
  std::vector<int> input_last_read;
  std::vector<bool> input_last_read_in_place;
  // Overlapped collectives (core/compile/schedule.h): per instruction, whether it runs on the
  // collective worker; per instruction (and once more for the end), how many of them must
  // have finished before it runs.
  std::vector<uint8_t> overlapped;
  std::vector<int> await_before;
  int num_overlapped = 0;
  // How the plan runs, as compiled: its overlap mode (off for a plan without replicas;
  // under worker the runner gives it a collective worker, core/runtime/jit_core.cc), and
  // which fusion formed its instructions.
  Overlap overlap = Overlap::off;
  Fusion fusion = Fusion::all;
  // The fpe check mode's site (CompileOptions::fpe_checks), or -1: run() then reads the CPU's
  // exception flags around every instruction (run_fpe, checks/fpe_report.h), all of them in
  // plan order on the calling thread.
  int fpe_site = -1;
  // The step-deadline site (CompileOptions::step_deadline), or -1. The runner passes it in
  // RunContext::deadline_site with the deadline; run() then reads the clock between
  // instructions (in every run mode: timeline recording, overlapped collectives and the fpe
  // check mode included). Once the step is past its deadline it
  // raises the site (payload: the time limit in seconds, the instruction reached) and runs
  // only the instructions that pair it with the other replicas (`pairs`), so every replica
  // still makes the same collective calls; the step's outputs are then garbage, and the
  // step-check handler's all-reduce of the flags tells every replica to throw or skip it.
  int deadline_site = -1;
  // Per instruction: it is a collective or a control op whose plans hold one.
  std::vector<uint8_t> pairs;
  bool holds_collective = false;

 private:
  // run()'s loop in the fpe check mode (core/compile/fpe_run.cc).
  void run_fpe(const Frame& frame, void* const* outputs, const ActivityLevel& level) const;
  // run()'s loop while the timeline records: one event per instruction.
  void run_recorded(const Frame& frame, const ActivityLevel& level) const;
  // run()'s loop with overlapped collectives on frame.ctx->worker.
  void run_overlapped(const Frame& frame, const ActivityLevel& level) const;
  // run()'s loop under a step deadline without overlapped collectives.
  void run_deadline(const Frame& frame, const ActivityLevel& level) const;
  // Under a step deadline: whether instruction i runs (every one until the step stops, then
  // only those in `pairs`), and after it, raising the deadline site once the step is past it.
  bool runs_under_deadline(const RunContext& ctx, size_t i) const {
    return !ctx.stopped || (i < pairs.size() && pairs[i]);
  }
  static void after_under_deadline(RunContext& ctx, int32_t i);
  // The test seam of core/compile/kernel_sleep_testing.h, before instruction `instr` runs.
  static void seam_before(const Instr& instr, RunContext& ctx);
  friend class Compiler;
  size_t table_bytes_ = 0;
};

}  // namespace fjit
