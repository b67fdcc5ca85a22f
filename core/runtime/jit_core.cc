#include "core/runtime/jit_core.h"

#include <algorithm>
#include <atomic>

#include "core/base/activity.h"
#include "core/base/cpu_support.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/base/timeline.h"
#include "core/compile/collective_worker.h"
#include "core/kernels/collective/communicator.h"
#include "core/runtime/step_checks.h"

namespace fjit {
namespace {

// Per-thread scratch reused by every run on this thread: allocates only when it must grow.
struct Scratch {
  std::vector<std::byte> workspace_raw;
  void* workspace = nullptr;
  size_t workspace_size = 0;
  std::vector<uint32_t> flags;
  std::vector<double> payload;
  std::vector<const void*> ins;
  std::vector<void*> outs;

  void* ensure(size_t bytes) {
    if (bytes > workspace_size) {
      workspace_raw.assign(bytes + 64, std::byte{0});
      auto p = reinterpret_cast<uintptr_t>(workspace_raw.data());
      workspace = reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
      workspace_size = bytes;
    }
    return workspace;
  }
};
thread_local Scratch t_scratch;

// The calling thread's collective worker (a replica's thread keeps its own, and its thread,
// for as long as it lives).
CollectiveWorker& collective_worker(int replica) {
  thread_local std::unique_ptr<CollectiveWorker> worker;
  thread_local int worker_replica = -1;
  if (!worker || worker_replica != replica) {
    worker.reset();
    worker = std::make_unique<CollectiveWorker>(replica);
    worker_replica = replica;
  }
  return *worker;
}

bool same_type(const Array& a, const ValueType& t) {
  // valid(): a moved-from Array keeps its type but not its storage (pmap moves outputs out).
  return a.defined() && a.valid() && a.dtype() == t.dtype && a.shape() == t.shape;
}

}  // namespace

JitCore::JitCore(JitOptions options) : options_(options.resolved()) {
  // Links core/base/cpu_support.cc into every program that jits: its start-up check has
  // already refused a CPU without the features this build needs.
  [[maybe_unused]] static const bool cpu_ok = cpu_features_missing().empty();
  apply_process_environment();
}

int64_t JitCore::compile_count() const {
  ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

std::vector<std::string> JitCore::recompile_causes() const {
  ReaderMutexLock lock(&mu_);
  return causes_;
}

std::shared_ptr<const CompiledEntry> JitCore::last_entry() const {
  ReaderMutexLock lock(&mu_);
  return entries_.empty() ? nullptr : entries_.back();
}

static bool matches(const CompiledEntry& e, const FlatArgs& args, CheckMode mode) {
  if (e.structure_hash != args.structure_hash || e.mode != mode ||
      e.exe->input_types.size() != args.leaves.size())
    return false;
  for (size_t i = 0; i < args.leaves.size(); ++i)
    if (!same_type(*args.leaves[i], e.exe->input_types[i])) return false;
  return true;
}

const CompiledEntry* JitCore::find(const FlatArgs& args) const {
  const CheckMode mode = options_.checks.value_or(default_check_mode());
  ReaderMutexLock lock(&mu_);
  for (const auto& e : entries_)
    if (matches(*e, args, mode)) {
      metrics().cache_hits.fetch_add(1, std::memory_order_relaxed);
      return e.get();
    }
  return nullptr;
}

std::shared_ptr<const CompiledEntry> JitCore::lookup(const FlatArgs& args, const ParamFn& params,
                                                     const TraceFn& trace) {
  const CheckMode mode = options_.checks.value_or(default_check_mode());
  MutexLock lock(&mu_);
  for (const auto& e : entries_)
    if (matches(*e, args, mode)) {
      metrics().cache_hits.fetch_add(1, std::memory_order_relaxed);
      return e;
    }
  return compile_locked(args, params, trace);
}

std::string JitCore::describe_change(const FlatArgs& args, const CompiledEntry& prev,
                                     std::string* changed) const {
  if (prev.structure_hash != args.structure_hash || prev.exe->input_types.size() != args.leaves.size()) {
    *changed = "<argument structure>";
    return "argument structure changed (dict names or number of arguments)";
  }
  for (size_t i = 0; i < args.leaves.size(); ++i) {
    const ValueType& t = prev.exe->input_types[i];
    const Array& a = *args.leaves[i];
    if (!same_type(a, t)) {
      *changed = prev.leaf_paths[i];
      return "arg '" + prev.leaf_paths[i] + "' " + type_str(t.dtype, t.shape) + " -> " +
             type_str(a.dtype(), a.shape());
    }
  }
  *changed = "<check mode>";
  return std::string("check mode changed to ") +
         check_mode_name(options_.checks.value_or(default_check_mode()));
}

std::shared_ptr<const CompiledEntry> JitCore::compile_locked(const FlatArgs& args,
                                                             const ParamFn& params,
                                                             const TraceFn& trace) {
  const int64_t t0 = now_ns();
  const CheckMode mode = options_.checks.value_or(default_check_mode());
  // Overlap needs replicas; the plan records what it was compiled with, and run() reads that.
  const Overlap overlap =
      options_.num_replicas > 1 ? options_.overlap.value_or(Overlap::off) : Overlap::off;
  TraceOptions topts;
  topts.checks = mode;
  topts.large_constant_bytes = options_.large_constant_bytes;
  topts.overlap_collectives = overlap != Overlap::off;
  topts.fusion_bytes = options_.fusion_bytes;
  topts.strict_unused = strict_unused_parameters();
  topts.while_max_trips = options_.while_max_trips;
  topts.step_deadline = options_.step_timeout_s > 0;
  TraceContext ctx(topts);
  ctx.axis_names = options_.axis_names;
  ctx.num_replicas = options_.num_replicas;
  ctx.axis_sizes = options_.axis_sizes;
  auto entry = std::make_shared<CompiledEntry>();
  entry->leaf_paths = params(ctx);
  for (size_t i = 0; i < args.leaves.size(); ++i) {
    const Node& p = ctx.graph.node(ctx.graph.parameters[i]);
    if (!same_type(*args.leaves[i], ValueType{p.dtype, p.shape}))
      throw std::logic_error("jit: parameter types disagree with the arguments: parameter " +
                             std::to_string(i) + " is " + type_str(p.dtype, p.shape) +
                             ", its argument " + type_str(args.leaves[i]->dtype(),
                                                          args.leaves[i]->shape()));
  }
  traces_.fetch_add(1);
  metrics().traces.fetch_add(1);
  std::vector<Tensor> outs = trace(ctx, entry->out);
  for (const Tensor& t : outs) {
    if (!t.defined() || t.context() != &ctx || t.trace_id() != ctx.trace_id())
      throw TraceError("fjit: jit '" + options_.name + "': an output is undefined or comes from another trace");
    ctx.graph.outputs.push_back(t.id());
  }
  CompileOptions copts;
  copts.name = options_.name;
  copts.automatic_checks = mode == CheckMode::all;
  copts.fpe_checks = mode == CheckMode::fpe;
  copts.step_deadline = topts.step_deadline && mode != CheckMode::off;
  copts.overlap = overlap;
  copts.gather_prefetch = options_.num_replicas > 1 && options_.gather_prefetch.value_or(true);
  copts.fusion = options_.fusion.value_or(Fusion::all);
  copts.dump_dir = options_.dump_dir.value_or("");
  entry->exe = compile(ctx.graph, ctx.check_sites, copts);
  entry->structure_hash = args.structure_hash;
  entry->mode = mode;

  const int64_t t1 = now_ns(), dt = t1 - t0;
  timeline::event(timeline::intern("compile " + options_.name), "compile", t0, t1);
  metrics().compiles.fetch_add(1);
  metrics().cache_misses.fetch_add(1);
  metrics().compile_time.record(dt);
  if (entries_.empty()) {
    log().debug("jit '{}': compiled in {:.3f} ms ({} instructions, arena {} bytes)", options_.name,
                dt / 1e6, entry->exe->instrs.size(), entry->exe->arena_bytes);
  } else {
    std::string changed;
    std::string cause = describe_change(args, *entries_.back(), &changed);
    causes_.push_back(cause);
    log().info("jit '{}': recompiling (compile #{}): {}", options_.name, entries_.size() + 1, cause);
    bool found = false;
    for (auto& [path, n] : change_counts_)
      if (path == changed) { ++n; found = true; }
    if (!found) change_counts_.emplace_back(changed, 1);
    if (!warned_ && static_cast<int>(entries_.size()) + 1 > options_.recompile_warn_threshold) {
      warned_ = true;
      auto worst = change_counts_.front();
      for (const auto& c : change_counts_)
        if (c.second > worst.second) worst = c;
      log().warn("jit '{}' has been compiled {} times; argument '{}' changed shape {} times. "
                 "Every new shape recompiles: pad or bucket it to a few static shapes.",
                 options_.name, entries_.size() + 1, worst.first, worst.second);
    }
  }
  entries_.push_back(entry);
  return entry;
}

bool JitCore::donated(const FlatArgs& args, size_t leaf) const {
  const auto& d = options_.donate_argnums;
  return std::find(d.begin(), d.end(), args.arg_of_leaf[leaf]) != d.end();
}

bool JitCore::sole_owner_of_bytes(const FlatArgs& args, size_t leaf) {
  for (size_t j = 0; j < args.leaves.size(); ++j)
    if (j != leaf && args.leaves[j]->shares_storage_with(*args.leaves[leaf])) return false;
  return true;
}

StepResult JitCore::run(const CompiledEntry& entry, const FlatArgs& args, std::span<Array> outputs,
                        Communicator* comm, int replica, int64_t step) {
  const Executable& exe = *entry.exe;
  Scratch& s = t_scratch;
  s.ins.resize(args.leaves.size());
  for (size_t i = 0; i < args.leaves.size(); ++i) s.ins[i] = args.leaves[i]->raw();
  s.outs.resize(outputs.size());
  // While replay bundles are written, a raising step's inputs must survive it: no donation.
  const bool may_donate = !options_.donate_argnums.empty() &&
                          (exe.num_check_sites() == 0 ||
                           (options_.policy.value_or(default_check_policy()) == CheckPolicy::log &&
                            !check_dump_enabled()));
  for (size_t k = 0; k < outputs.size(); ++k) {
    bool fresh = !same_type(outputs[k], exe.output_types[k]);
    const int donor = may_donate && k < entry.out.passthrough.size() ? entry.out.passthrough[k] : -1;
    for (size_t i = 0; i < args.leaves.size() && !fresh; ++i) {
      if (!outputs[k].shares_storage_with(*args.leaves[i])) continue;
      fresh = !(static_cast<int>(i) == donor && donated(args, i) && exe.can_alias(donor, static_cast<int>(k)) &&
                outputs[k].raw() == args.leaves[i]->raw() && sole_owner_of_bytes(args, i));
    }
    for (size_t j = 0; j < k && !fresh; ++j)
      fresh = outputs[k].shares_storage_with(outputs[j]);
    if (fresh) outputs[k] = Array(exe.output_types[k].dtype, exe.output_types[k].shape);
    s.outs[k] = outputs[k].raw();
  }
  bind_activity(replica);  // stall reports name the instruction this replica runs
  RunContext ctx;
  ctx.comm = comm;
  ctx.replica = replica;
  ctx.num_replicas = options_.num_replicas;
  const int sites = exe.num_check_sites();
  if (sites > 0) {
    s.flags.assign(sites, 0);
    s.payload.assign(static_cast<size_t>(sites) * kCheckPayloadSlots, 0.0);
    ctx.flags = s.flags.data();
    ctx.payload = s.payload.data();
  }
  // Under MPI on one machine, the communicator's shared workspace: its collectives then read
  // a gradient where the plan wrote it (core/kernels/collective/communicator.h).
  void* ws = comm != nullptr ? comm->shared_workspace(exe.workspace_bytes()) : nullptr;
  if (ws == nullptr) ws = s.ensure(exe.workspace_bytes());
  // A plan without overlap flags only its prefetched all-gathers (core/compile/schedule.h).
  if (exe.num_overlapped > 0 && exe.overlap != Overlap::schedule && comm != nullptr &&
      comm->callable_from_any_thread())
    ctx.worker = &collective_worker(replica);
  const bool recorded = timeline::enabled();
  const int64_t t0 = now_ns();
  if (options_.step_timeout_s > 0) {
    ctx.timeout_ns = static_cast<int64_t>(options_.step_timeout_s * 1e9);
    ctx.deadline_ns = t0 + ctx.timeout_ns;
    ctx.deadline_site = exe.deadline_site;
  }
  if (recorded) {
    timeline::set_track(replica);
    timeline::begin_step(step >= 0 ? step : steps_.load(), t0);
  }
  // Ends the timeline's step however this run leaves (a raised check throws).
  struct StepEnd {
    bool on;
    ~StepEnd() {
      if (on) timeline::end_step(now_ns());
    }
  } step_end{recorded};
  exe.run(s.ins.data(), s.outs.data(), ctx, ws);
  metrics().execute_time.record(now_ns() - t0);
  const bool own_count = step < 0;  // see the header: pmap numbers and counts its steps once
  if (own_count) {
    step = steps_.fetch_add(1);
    metrics().steps.fetch_add(1, std::memory_order_relaxed);
  }
  StepResult result;
  if (sites > 0) {
    metrics().checks_evaluated.fetch_add(sites, std::memory_order_relaxed);
    StepChecks sc;
    sc.exe = &exe;
    sc.flags = s.flags.data();
    sc.payload = s.payload.data();
    sc.comm = comm;
    sc.replica = replica;
    sc.step = step;
    sc.policy = options_.policy.value_or(default_check_policy());
    sc.function = options_.name.c_str();
    sc.inputs = args.leaves;
    sc.input_paths = entry.leaf_paths;
    sc.outputs = outputs;
    sc.mode = entry.mode;
    sc.axis_names = options_.axis_names;
    sc.num_replicas = options_.num_replicas;
    sc.axis_sizes = options_.axis_sizes;
    sc.raised_kinds = &result.raised_kinds;
    result.skipped = step_check_handler()(sc);
    if (result.skipped) {
      if (own_count) metrics().steps_skipped.fetch_add(1, std::memory_order_relaxed);
      for (size_t k = 0; k < outputs.size() && k < entry.out.passthrough.size(); ++k)
        if (entry.out.passthrough[k] >= 0) outputs[k] = *args.leaves[entry.out.passthrough[k]];
    }
  }
  return result;
}

}  // namespace fjit
