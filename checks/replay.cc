// replay_traced: load, re-trace and compare, run with every automatic check, then search op by
// op (checks/replay_search.cc).
#include "checks/replay.h"

#include <cstdlib>
#include <cstring>

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

// Runs the plan once on the bundle's inputs as replica `b.replica` alone; returns the report
// of the checks it raised, or "".
std::string run_with_checks(const Executable& exe, const ReplayBundle& b) {
  std::vector<const void*> ins;
  for (const auto& kv : b.inputs) ins.push_back(kv.second.raw());
  std::vector<Array> outs;
  std::vector<void*> out_ptrs;
  for (const ValueType& t : exe.output_types) outs.emplace_back(t.dtype, t.shape);
  for (Array& a : outs) out_ptrs.push_back(a.raw());
  const int sites = exe.num_check_sites();
  std::vector<uint32_t> flags(sites, 0);
  std::vector<double> payload(static_cast<size_t>(sites) * kCheckPayloadSlots, 0.0);
  RunContext ctx;
  ctx.replica = b.replica;
  ctx.num_replicas = 1;
  ctx.flags = flags.data();
  ctx.payload = payload.data();
  std::vector<std::byte> raw(exe.workspace_bytes() + 64);
  auto p = reinterpret_cast<uintptr_t>(raw.data());
  void* ws = reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
  exe.run(ins.data(), out_ptrs.data(), ctx, ws);
  RaisedChecks raised;
  raised.step = b.step;
  raised.replicas.resize(sites);
  raised.values.resize(sites);
  for (int i = 0; i < sites; ++i) {
    if (!flags[i]) continue;
    raised.replicas[i].push_back(b.replica);
    std::copy_n(payload.data() + static_cast<size_t>(i) * kCheckPayloadSlots, kCheckPayloadSlots,
                raised.values[i].begin());
  }
  if (raised.count() == 0) return "";
  return format_check_report(exe, raised, b.function.c_str(), CheckPolicy::log);
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
  const ReplayBundle& b = r.bundle;
  const uint64_t fp = plan_fingerprint(*trace_and_compile(b, trace, b.mode));
  if (fp != b.fingerprint)
    throw ReplayMismatchError(
        "fjit::replay: " + bundle_dir + " was written by a different program: its plan's fingerprint is " +
        fingerprint_hex(b.fingerprint) + ", the function given traces to " + fingerprint_hex(fp) +
        " (the same function, model configuration and check mode '" + check_mode_name(b.mode) +
        "' must be used; FJIT_CHECKS must not change which checks the function records)");
  auto exe = trace_and_compile(b, trace, CheckMode::all);
  r.check_report = run_with_checks(*exe, b);
  search_first_bad_op(*exe, b, r);
  r.text = format_replay(r);
  return r;
}

}  // namespace fjit
