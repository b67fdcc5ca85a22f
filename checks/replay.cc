// replay_traced: load, re-trace and compare, run with every automatic check, then search op by
// op (checks/replay_search.cc).
#include "checks/replay.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "checks/replay_group.h"
#include "checks/replay_search.h"
#include "checks/report.h"
#include "core/compile/compiler.h"
#include "core/trace/collectives.h"

namespace fjit {
namespace {

constexpr const char* kReplicaWeight = "__replica_weight";

// The paths of the bundle being traced, for the template's argument makers.
thread_local const std::vector<std::string>* t_paths = nullptr;

std::string fingerprint_hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Traces the function on the bundle's inputs as jit/pmap did, in `mode`, and compiles it.
std::shared_ptr<const Executable> trace_and_compile(const ReplayBundle& b, const ReplayTraceFn& trace,
                                                    CheckMode mode) {
  // The options a jit made now would resolve (the process's FJIT_* variables), as the
  // replaying process is configured; the replay runs one replica alone, without overlap.
  const JitOptions resolved = JitOptions{}.resolved();
  TraceOptions topts;
  topts.checks = mode;
  topts.large_constant_bytes = resolved.large_constant_bytes;
  topts.fusion_bytes = resolved.fusion_bytes;
  topts.strict_unused = strict_unused_parameters();
  TraceContext ctx(topts);
  ctx.axis_names = b.axis_names;
  ctx.num_replicas = b.num_replicas;
  ctx.axis_sizes = b.axis_sizes;
  std::vector<Tensor> leaves;
  std::vector<std::string> paths;
  for (const auto& [path, value] : b.inputs) {
    leaves.push_back(ctx.parameter(value.dtype(), value.shape(), path));
    paths.push_back(path);
  }
  // pmap builds pmean's scale before the user's ops (parallel/pmap.h); so does the replay.
  if (!b.axis_names.empty()) detail::mean_scale(DType::f32);
  t_paths = &paths;
  struct Reset {
    ~Reset() { t_paths = nullptr; }
  } reset;
  std::vector<Tensor> outs = trace(ctx, leaves);
  for (const Tensor& t : outs) {
    if (!t.defined() || t.context() != &ctx)
      throw TraceError("fjit::replay: an output is undefined or comes from another trace");
    ctx.graph.outputs.push_back(t.id());
  }
  CompileOptions copts;
  copts.name = b.function;
  copts.automatic_checks = mode == CheckMode::all;
  copts.fusion = resolved.fusion.value_or(Fusion::all);
  copts.dump_dir = resolved.dump_dir.value_or("");
  return compile(ctx.graph, ctx.check_sites, copts);
}

struct ReplicaRun {
  std::vector<Array> outputs;
  std::vector<uint32_t> flags;
  std::vector<double> payload;
};

// Runs `body(k, ctx)` for every replayed replica: on this thread when there is one, else on
// one thread per replica with the group's communicators. The first error is rethrown.
template <class Body>
void for_each_replica(const std::vector<ReplayBundle>& parts, Body body) {
  const int n = static_cast<int>(parts.size());
  auto ctx_of = [&](int k, Communicator* comm) {
    RunContext ctx;
    ctx.comm = comm;
    ctx.replica = parts[k].replica;
    ctx.num_replicas = n;
    return ctx;
  };
  if (n == 1) return body(0, ctx_of(0, nullptr));
  ReplayGroup group(n, parts[0].axis_names, parts[0].axis_sizes);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k)
    threads.emplace_back([&, k] {
      try {
        body(k, ctx_of(k, &group.member(k)));
      } catch (const std::exception& e) {
        errors[k] = std::current_exception();
        group.fail(k, e.what());
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// Runs the plan once on every replayed replica's inputs.
std::vector<ReplicaRun> run_plan(const Executable& exe, const std::vector<ReplayBundle>& parts) {
  std::vector<ReplicaRun> runs(parts.size());
  for_each_replica(parts, [&](int k, RunContext ctx) {
    const ReplayBundle& b = parts[k];
    ReplicaRun& run = runs[k];
    std::vector<const void*> ins;
    for (const auto& kv : b.inputs) ins.push_back(kv.second.raw());
    std::vector<void*> out_ptrs;
    for (const ValueType& t : exe.output_types) run.outputs.emplace_back(t.dtype, t.shape);
    for (Array& a : run.outputs) out_ptrs.push_back(a.raw());
    const int sites = exe.num_check_sites();
    run.flags.assign(sites, 0);
    run.payload.assign(static_cast<size_t>(sites) * kCheckPayloadSlots, 0.0);
    ctx.flags = run.flags.data();
    ctx.payload = run.payload.data();
    std::vector<std::byte> raw(exe.workspace_bytes() + 64);
    auto p = reinterpret_cast<uintptr_t>(raw.data());
    void* ws = reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
    exe.run(ins.data(), out_ptrs.data(), ctx, ws);
  });
  return runs;
}

// The report of the checks the replayed replicas raised, or "".
std::string check_report(const Executable& exe, const std::vector<ReplayBundle>& parts,
                         const std::vector<ReplicaRun>& runs) {
  const int sites = exe.num_check_sites();
  RaisedChecks raised;
  raised.step = parts[0].step;
  raised.num_replicas = static_cast<int>(parts.size());
  raised.replicas.resize(sites);
  raised.values.resize(sites);
  for (int i = 0; i < sites; ++i)
    for (size_t k = 0; k < runs.size(); ++k) {
      if (!runs[k].flags[i]) continue;
      if (raised.replicas[i].empty())
        std::copy_n(runs[k].payload.data() + static_cast<size_t>(i) * kCheckPayloadSlots, kCheckPayloadSlots,
                    raised.values[i].begin());
      raised.replicas[i].push_back(parts[k].replica);
    }
  if (raised.count() == 0) return "";
  return format_check_report(exe, raised, parts[0].function.c_str(), CheckPolicy::log);
}

// Every replica's part of the step of `first`, when all are there (else just `first`).
std::vector<ReplayBundle> load_parts(ReplayBundle first) {
  std::vector<ReplayBundle> parts;
  if (first.num_replicas > 1) {
    for (int k = 0; k < first.num_replicas; ++k) {
      if (k == first.replica) {
        parts.push_back(first);
        continue;
      }
      const std::string dir = replay_part_path(first.dir, first.step, k);
      if (!std::filesystem::is_directory(dir)) break;
      ReplayBundle b = load_replay_bundle(dir);
      if (b.fingerprint != first.fingerprint || b.num_replicas != first.num_replicas || b.replica != k ||
          b.axis_sizes != first.axis_sizes)
        throw std::runtime_error(dir + ": is not a part of the step of " + first.dir +
                                 " (another plan, replica count, mesh or replica number)");
      parts.push_back(std::move(b));
    }
    if (static_cast<int>(parts.size()) == first.num_replicas) return parts;
  }
  return {std::move(first)};
}

}  // namespace

namespace detail {

const std::vector<std::string>& replay_leaf_paths() {
  if (t_paths == nullptr) throw std::logic_error("replay_leaf_paths: no replay is tracing");
  return *t_paths;
}

Tensor replay_tensor_arg(const std::vector<Tensor>& leaves, const std::vector<std::string>& paths,
                         std::vector<bool>& used, int arg) {
  const std::string want = "arg" + std::to_string(arg);
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i] == want) {
      used[i] = true;
      return leaves[i];
    }
  throw ReplayMismatchError("fjit::replay: the function's parameter " + std::to_string(arg) +
                            " is a Tensor, but the bundle has no input '" + want +
                            "' (was it written by this function?)");
}

TensorDict replay_dict_arg(const std::vector<Tensor>& leaves, const std::vector<std::string>& paths,
                           std::vector<bool>& used, int arg) {
  const std::string prefix = "arg" + std::to_string(arg) + ".";
  TensorDict d;
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i].rfind(prefix, 0) == 0) {
      used[i] = true;
      d.set(paths[i].substr(prefix.size()), leaves[i]);
    }
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i] == prefix.substr(0, prefix.size() - 1))
      throw ReplayMismatchError("fjit::replay: the function's parameter " + std::to_string(arg) +
                                " is a Params dict, but the bundle's input '" + paths[i] +
                                "' is a single array (was it written by this function?)");
  return d;
}

void replay_check_all_used(const std::vector<std::string>& paths, const std::vector<bool>& used) {
  std::string unused;
  for (size_t i = 0; i < paths.size(); ++i)
    if (!used[i] && paths[i] != kReplicaWeight) unused += (unused.empty() ? "" : ", ") + paths[i];
  if (!unused.empty())
    throw ReplayMismatchError("fjit::replay: the function has no parameter for the bundle's inputs " +
                              unused + " (was it written by this function?)");
}

}  // namespace detail

ReplayResult replay_traced(const std::string& bundle_dir, const ReplayTraceFn& trace) {
  ReplayResult r;
  r.bundle = load_replay_bundle(bundle_dir);
  std::vector<ReplayBundle> parts = load_parts(r.bundle);
  const ReplayBundle& b = r.bundle;
  const auto recorded = trace_and_compile(b, trace, b.mode);
  const uint64_t fp = plan_fingerprint(*recorded);
  if (fp != b.fingerprint)
    throw ReplayMismatchError(
        "fjit::replay: " + bundle_dir + " was written by a different program: its plan's fingerprint is " +
        fingerprint_hex(b.fingerprint) + ", the function given traces to " + fingerprint_hex(fp) +
        " (the same function, model configuration and check mode '" + check_mode_name(b.mode) +
        "' must be used; FJIT_CHECKS must not change which checks the function records)");
  std::vector<ReplicaRun> as_run;
  try {
    as_run = run_plan(*recorded, parts);
  } catch (const std::runtime_error& e) {
    if (parts.size() == 1) throw;
    // A step the thread replicas cannot replay together (a collective of a dtype the
    // replay does not combine): its part alone, saying why.
    r.note = fmt::format("the replicas could not be replayed together ({}); this replica is replayed alone",
                         e.what());
    parts = {r.bundle};
    as_run = run_plan(*recorded, parts);
  }
  r.replicas_replayed = static_cast<int>(parts.size());
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].outputs.empty()) continue;
    r.outputs_compared = true;
    for (size_t o = 0; o < as_run[k].outputs.size(); ++o)
      if (o >= parts[k].outputs.size() || !as_run[k].outputs[o].bit_equal(parts[k].outputs[o].second))
        r.output_mismatches.push_back(fmt::format("replica {} out{}", parts[k].replica, o));
  }
  auto exe = trace_and_compile(b, trace, CheckMode::all);
  r.check_report = check_report(*exe, parts, run_plan(*exe, parts));
  // Every replica walks at once (their collectives meet); the first bad op wins.
  std::vector<ReplayResult> found(parts.size());
  std::vector<int64_t> at(parts.size(), -1);
  for_each_replica(parts, [&](int k, RunContext ctx) {
    found[k].bundle.dir = parts[k].dir;
    at[k] = search_first_bad_op(*exe, parts[k], ctx, found[k]);
  });
  int best = -1;
  for (size_t k = 0; k < parts.size(); ++k)
    if (at[k] >= 0 && (best < 0 || at[k] < at[best])) best = static_cast<int>(k);
  int input_from = best;
  for (size_t k = 0; k < parts.size() && input_from < 0; ++k)
    if (!found[k].bad_input.empty()) input_from = static_cast<int>(k);
  if (input_from < 0) input_from = 0;
  ReplayResult& w = found[best >= 0 ? best : input_from];
  w.bundle = std::move(r.bundle);
  w.check_report = std::move(r.check_report);
  w.replicas_replayed = r.replicas_replayed;
  w.outputs_compared = r.outputs_compared;
  w.output_mismatches = std::move(r.output_mismatches);
  w.note = std::move(r.note);
  if (best < 0) w.replica = parts[input_from].replica;
  w.text = format_replay(w);
  return w;
}

}  // namespace fjit
