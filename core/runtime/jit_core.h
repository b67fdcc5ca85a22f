// JitCore: the type-erased heart of jit() — the compile cache of one function, keyed by the
// flattened input signature (dtypes, shapes, argument structure, check mode), and the run of
// a cached plan with per-thread workspace.
//
// A cache hit neither traces nor allocates. Every miss is counted and logged with its cause
// ("arg 'x' shape [128,784] -> [96,784]"); past `recompile_warn_threshold` compiles of one
// function, a loud warning names the argument whose shape keeps changing.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/compile/compiler.h"
#include "core/base/mutex.h"
#include "core/trace/tensor.h"

namespace fjit {

// A jit's or pmap's options. Every field left unset is resolved once, when the jit or pmap is
// made (resolved()), from its FJIT_* variable (core/base/config.def) or its default; the
// stages below take the resolved values as TraceOptions and CompileOptions.
struct JitOptions {
  std::string name = "fn";
  std::optional<CheckMode> checks;      // default: FJIT_CHECKS (off|user|all), else user
  std::optional<CheckPolicy> policy;    // default: FJIT_ON_CHECK_FAILURE, else throw_error
  int recompile_warn_threshold = -1;    // default: FJIT_RECOMPILE_WARN, else 8
  int64_t large_constant_bytes = -1;    // default: FJIT_LARGE_CONSTANT_BYTES, else 1 MiB
  // Bucket size of psum and pmean of a dict (core/trace/collectives.h). Default:
  // FJIT_FUSION_BYTES, else 1 MiB; raised to at least 1024.
  int64_t fusion_bytes = -1;
  // Which fused instructions the compiler forms (Fusion, core/compile/executable.h).
  // Unset: FJIT_FUSION, else all.
  std::optional<Fusion> fusion;
  // Where every compile writes its graphs and plan (CompileOptions::dump_dir). Unset:
  // FJIT_DUMP_DIR; empty: no dumps.
  std::optional<std::string> dump_dir;
  // Donation (JAX's donate_argnums): top-level arguments whose storage the step may reuse for
  // the outputs that replace them. With run_into(out, args...) where `out` holds the very
  // Arrays passed as a donated argument (e.g. the parameters), each updated leaf is written in
  // place when the plan allows it (Executable::can_alias); otherwise, and in every case where
  // a raised check must leave the previous state intact (check sites under the throw or
  // skip_step policy), a fresh output is allocated as without donation. Not used by pmap.
  std::vector<int> donate_argnums;
  // Under pmap, how the all-reduces overlap the instructions after them (Overlap,
  // core/compile/executable.h). Unset: FJIT_OVERLAP, else off. The plan records the mode it
  // was compiled with (Executable::overlap; off with one replica), and runs by that.
  std::optional<Overlap> overlap;
  // Under pmap, whether each all-gather of a plan input (ZeRO stage 3's parameter shards)
  // starts ahead of its first reader on the collective worker (core/compile/schedule.h), or
  // just before it on the plan's thread. Unset: FJIT_GATHER_PREFETCH, else on.
  std::optional<bool> gather_prefetch;
  // Set by pmap: the named axis collectives may use, and the number of replicas on it.
  std::vector<std::string> axis_names;
  int num_replicas = 1;
  // Set by shard_map: the size of each of axis_names (empty: each spans num_replicas).
  std::vector<int> axis_sizes;
  // A step that never ends (core/compile/loop_guard.h). With checks on, every while_loop of
  // the step stops once the step has run this long (seconds; 0: no deadline) and raises a
  // step_timeout check. Unset (negative): FJIT_STEP_TIMEOUT, else 0.
  double step_timeout_s = -1;
  // With checks on, the trip limit of a while_loop that sets none (WhileOptions::max_trips):
  // it stops there and raises a loop_trip_limit check (0: no limit). Unset (negative):
  // FJIT_WHILE_MAX_TRIPS, else 0.
  int64_t while_max_trips = -1;
  // Resolves every unset field but checks and policy (the process defaults below stand in
  // for those) from the environment (JitCore's constructor calls it). The integer variables
  // are read strictly (core/base/config.def): an integer from 1 to 2^30, unset or empty for
  // the default; anything else, or an FJIT_OVERLAP that is none of its values, throws
  // std::invalid_argument naming the variable.
  JitOptions resolved() const;
};

// Process-wide defaults, initialised from FJIT_CHECKS and FJIT_ON_CHECK_FAILURE on first use;
// a JitOptions field that is set overrides them for that function.
CheckMode default_check_mode();
void set_default_check_mode(CheckMode mode);
CheckPolicy default_check_policy();
void set_default_check_policy(CheckPolicy policy);

// Process-wide: strict mode turns autodiff's unused-parameter warning into a TraceError
// (core/autodiff/autodiff.h) in the traces of every jit and pmap compiled afterwards.
// Initially FJIT_STRICT_UNUSED, read on first use.
void set_strict_unused_parameters(bool strict);
bool strict_unused_parameters();

// The process-wide settings of the environment that no option carries: the GEMM library's
// use (FJIT_GEMM, core/kernels/gemm/gemm_library.h), the kernels' instruction set (FJIT_ISA,
// core/base/isa.h) and the timeline (FJIT_TIMELINE and
// FJIT_TIMELINE_STEPS, written at exit; core/base/timeline.h). Applied once per process, by
// the first jit or pmap made (JitCore's constructor); later calls do nothing. A malformed
// FJIT_TIMELINE_STEPS throws std::invalid_argument, and the next call tries again.
void apply_process_environment();

// The flattened form of a call's arguments: one entry per leaf array.
struct FlatArgs {
  std::vector<const Array*> leaves;
  std::vector<int> arg_of_leaf;   // top-level argument index of each leaf
  uint64_t structure_hash = 0;    // hash of argument kinds and dict names
  void clear() { leaves.clear(); arg_of_leaf.clear(); structure_hash = 0; }
};

// What tracing learned about the outputs.
struct OutTree {
  std::vector<std::vector<std::string>> dict_names;  // per Dict component, in order
  std::vector<int> leaf_dict;                        // per output leaf: its dict, or -1
  // Per output leaf: the input leaf it replaces (same dict path and type) when a step is
  // skipped, or -1.
  std::vector<int> passthrough;
};

struct CompiledEntry {
  std::shared_ptr<const Executable> exe;
  OutTree out;
  uint64_t structure_hash = 0;
  CheckMode mode = CheckMode::off;
  std::vector<std::string> leaf_paths;  // "arg0", "params.w1", for messages
};

// Traces the user function: given the parameter leaves (already added to ctx), returns the
// output leaves and fills the output tree.
using TraceFn = std::function<std::vector<Tensor>(TraceContext& ctx, OutTree& out)>;
// Adds parameters for every leaf; returns leaf paths. Called inside the fresh trace.
using ParamFn = std::function<std::vector<std::string>(TraceContext& ctx)>;

static_assert(kNumCheckKinds <= 64, "StepResult::raised_kinds holds one bit per check kind");
struct StepResult {
  bool skipped = false;  // the check policy discarded this step's outputs
  // Bit k: a check of CheckKind k raised in this step on some replica (the same on every
  // replica). Zero when nothing raised, the plan has no checks, or the policy threw.
  uint64_t raised_kinds = 0;
  bool raised(CheckKind k) const { return (raised_kinds >> static_cast<unsigned>(k)) & 1; }
};

class JitCore {
 public:
  explicit JitCore(JitOptions options);

  // The cached plan for `args`, or null (no tracing, no allocation). Entries live as long
  // as the JitCore.
  const CompiledEntry* find(const FlatArgs& args) const;
  // Finds or builds the plan for `args`. Thread-safe; compiles at most once per signature.
  std::shared_ptr<const CompiledEntry> lookup(const FlatArgs& args, const ParamFn& params,
                                              const TraceFn& trace);
  // Runs `entry` on the leaves, writing into `outputs` (allocated to the output types when
  // not already of that type, or when they share storage with an input). Then handles the
  // check flags by policy: may throw CheckError, or skip (outputs replaced by passthrough inputs).
  //
  // Step numbers are 0-based: the first step of a function is step 0, and CheckError::step()
  // and the report's "at step N" give the number of steps that function ran before the
  // failing one. With step < 0 (jit) this JitCore numbers its own runs and counts them in
  // step_count() and metrics().steps/steps_skipped. Replicas sharing one JitCore (pmap) must
  // pass the caller's step number instead, the same on every replica; then nothing is counted
  // here and the caller counts the step once.
  StepResult run(const CompiledEntry& entry, const FlatArgs& args, std::span<Array> outputs,
                 Communicator* comm = nullptr, int replica = 0, int64_t step = -1);

  const JitOptions& options() const { return options_; }
  int64_t trace_count() const { return traces_.load(); }
  int64_t compile_count() const;
  // Steps run through run() without an explicit step number (jit; pmap counts its own).
  int64_t step_count() const { return steps_.load(); }
  // The causes of every recompile so far, oldest first.
  std::vector<std::string> recompile_causes() const;
  // The most recently compiled plan (for inspection), or null.
  std::shared_ptr<const CompiledEntry> last_entry() const;

 private:
  std::shared_ptr<const CompiledEntry> compile_locked(const FlatArgs& args, const ParamFn& params,
                                                      const TraceFn& trace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Donation: leaf belongs to a donated argument; no other input leaf overlaps its bytes.
  bool donated(const FlatArgs& args, size_t leaf) const;
  static bool sole_owner_of_bytes(const FlatArgs& args, size_t leaf);
  std::string describe_change(const FlatArgs& args, const CompiledEntry& prev,
                              std::string* changed_leaf) const;

  JitOptions options_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<const CompiledEntry>> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> causes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, int>> change_counts_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> traces_{0}, steps_{0};
};

}  // namespace fjit
