#include "parallel/pmap_core.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "parallel/shm_communicator.h"

namespace fjit {
namespace {

bool is_uneven(const std::vector<int64_t>& rows) {
  return std::any_of(rows.begin(), rows.end(), [&](int64_t n) { return n != rows[0]; });
}
uint64_t mix(uint64_t h, uint64_t v) { return (h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2))); }
constexpr size_t kDescBytes = 1024;
constexpr const char* kTraceFailedText = "tracing failed: ";

}  // namespace

// What replicas must agree on so that no collective can deadlock or mix up buffers: the
// sequence of collectives with their exact shapes, and the dtypes and ranks of the inputs and
// outputs. The other nodes are left out on purpose: shards of an uneven batch trace the same
// program with different constants (1/rows), and the simplifier removes a `* 1` or a sum
// over one row for a one-row shard only, so replicas that legitimately run the same program
// can end up with different node lists. A replica computing something else between the same
// collectives does not hang anyone; the divergence check catches what it computes.
uint64_t program_fingerprint(const CompiledEntry& entry, const std::vector<uint8_t>& sharded) {
  uint64_t h = 1469598103934665603ull;
  for (const auto* types : {&entry.exe->input_types, &entry.exe->output_types}) {
    h = mix(h, types->size());
    for (const ValueType& t : *types) h = mix(h, static_cast<uint64_t>(t.dtype) * 131 + t.shape.size());
  }
  // Input extents: replicas feeding 32 and 33 features to a model that reduces over them
  // first trace equal graphs otherwise, and would train on silently.
  const auto& inputs = entry.exe->input_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool split = i < sharded.size() && sharded[i];
    for (size_t d = split ? 1 : 0; d < inputs[i].shape.size(); ++d)
      h = mix(h, static_cast<uint64_t>(inputs[i].shape[d]) * 31 + d);
  }
  for (const Node& n : entry.exe->graph->nodes()) {
    if (op_kind(n.op) != OpKind::kCollective) continue;
    h = mix(h, static_cast<uint64_t>(n.op) * 131 + static_cast<uint64_t>(n.dtype) * 7 + n.shape.size());
    for (int64_t d : n.shape) h = mix(h, static_cast<uint64_t>(d));
    h = mix(h, n.attrs.reduce);
    h = mix(h, std::hash<std::string>{}(n.attrs.name));
    for (int64_t v : n.attrs.axes) h = mix(h, static_cast<uint64_t>(v));  // ppermute's table, uneven shards
  }
  return mix(h, entry.exe->check_sites.size());
}

std::string program_description(const CompiledEntry& entry) {
  std::string s = "inputs:";
  for (size_t i = 0; i < entry.exe->input_types.size(); ++i) {
    const ValueType& t = entry.exe->input_types[i];
    s += " " + (i < entry.leaf_paths.size() ? entry.leaf_paths[i] : std::string("?")) + " " + type_str(t.dtype, t.shape);
  }
  s += "; collectives:";
  for (const Node& n : entry.exe->graph->nodes())
    if (op_kind(n.op) == OpKind::kCollective) s += std::string(" ") + op_name(n.op) + " " + type_str(n.dtype, n.shape);
  int ops = 0;
  for (const Node& n : entry.exe->graph->nodes()) ops += n.op != Op::Constant;
  s += "; " + std::to_string(ops) + " non-constant nodes";
  return s;
}

uint64_t data_fingerprint(const Array& a) {
  uint64_t h = 0x243f6a8885a308d3ull ^ a.nbytes();
  const auto* p = static_cast<const unsigned char*>(a.raw());
  size_t n = a.nbytes(), i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

PmapCore::PmapCore(Mesh mesh, std::string axis, PmapOptions options)
    : mesh_(std::move(mesh)),
      axis_(std::move(axis)),
      divergence_every_(options.divergence_check_every >= 0
                            ? options.divergence_check_every
                            : static_cast<int>(config::divergence_check_every())),
      jit_([&] {
        JitOptions o = options.jit;
        // Thread replicas read one shared copy of replicated inputs: none may write it in place.
        if (!o.donate_argnums.empty())
          log().warn("pmap '{}': donate_argnums is ignored under pmap (replicas share their inputs)", o.name);
        o.donate_argnums.clear();
        o.axis_names = {axis_};
        o.num_replicas = mesh_.size();
        if (!mesh_.axes().empty()) {  // shard_map on a mesh with named axes: collectives name one
          o.axis_names.clear();
          for (const MeshAxis& a : mesh_.axes()) {
            o.axis_names.push_back(a.name);
            o.axis_sizes.push_back(a.size);
          }
        }
        return o;
      }()) {}

// Every replica's fixed-size words, in job order: this process's replicas' words, gathered
// from every process over the process communicator when the job has more than one.
std::vector<int64_t> PmapCore::gather_job(const std::vector<int64_t>& local_words) const {
  Communicator* pc = mesh_.process_comm();
  if (pc == nullptr) return local_words;
  std::vector<int64_t> all(local_words.size() * pc->size());
  pc->all_gather(local_words.data(), all.data(), local_words.size() * sizeof(int64_t));
  return all;
}

bool PmapCore::compare_programs(const std::vector<const CompiledEntry*>& entries, std::vector<int64_t>& rows,
                                const std::vector<uint8_t>& sharded, const std::vector<int64_t>& assumed) {
  const int local = mesh_.local_size(), n = mesh_.size();
  // One gather carries every replica's fingerprint, shard size and workspace size. A replica
  // whose tracing failed (no entry) sends a fingerprint no program has.
  constexpr int64_t kTraceFailed = INT64_MIN;
  std::vector<int64_t> mine(3 * local);
  for (int r = 0; r < local; ++r) {
    mine[3 * r] = entries[r] ? static_cast<int64_t>(program_fingerprint(*entries[r], sharded)) : kTraceFailed;
    mine[3 * r + 1] = rows[r];
    mine[3 * r + 2] = entries[r] ? static_cast<int64_t>(entries[r]->exe->workspace_bytes()) : 0;
  }
  const std::vector<int64_t> all = gather_job(mine);
  rows.assign(n, 0);
  int64_t workspace = 0;
  bool same = true;
  for (int r = 0; r < n; ++r) {
    rows[r] = all[3 * r + 1];
    same = same && all[3 * r] == all[0];
    workspace = std::max(workspace, all[3 * r + 2]);
  }
  if (rows != assumed && (is_uneven(rows) || is_uneven(assumed))) return false;
  // The same programs can still need workspaces of different sizes (uneven shards change
  // which constants CSE merges), so every process reserves the largest: a collective entered
  // by all of them alike. A no-op once reserved, and for backends without shared workspaces.
  if (same && mesh_.process_comm() != nullptr)
    mesh_.process_comm()->reserve_shared_workspace(static_cast<size_t>(workspace));
  std::vector<std::string> descs;
  if (!same) {
    // Descriptions travel as fixed-size blocks of int64 words, like everything gathered here.
    constexpr size_t kWords = kDescBytes / sizeof(int64_t);
    std::vector<int64_t> text(kWords * local, 0);
    for (int r = 0; r < local; ++r) {
      std::string d = entries[r] ? program_description(*entries[r]) : kTraceFailedText + trace_error_;
      d.resize(kDescBytes - 1, ' ');
      std::memcpy(text.data() + kWords * r, d.data(), d.size());
    }
    const std::vector<int64_t> gathered = gather_job(text);
    for (int r = 0; r < n; ++r) {
      std::string d(reinterpret_cast<const char*>(gathered.data() + kWords * r), kDescBytes - 1);
      d.erase(d.find_last_not_of(' ') + 1);
      descs.push_back(d);
    }
  }
  trace_error_.clear();
  for (int r = 0; r < n && !same; ++r)
    if (all[3 * r] == kTraceFailed) {
      // The first failing replica's error, raised by every process alike.
      std::string msg = "pmap '" + jit_.options().name + "': tracing failed on replica " +
                        std::to_string(r) + " of " + std::to_string(n) + ": " +
                        descs[r].substr(std::string(kTraceFailedText).size());
      log().error("{}", msg);
      throw TraceError(msg);
    }
  if (!same) {
    std::string msg = "pmap '" + jit_.options().name + "': replicas traced different programs:";
    for (size_t r = 0; r < descs.size(); ++r) msg += "\n  replica " + std::to_string(r) + ": " + descs[r];
    log().error("{}", msg);
    throw ReplicaMismatchError(msg);
  }
  return true;
}

void PmapCore::check_divergence(const CompiledEntry& entry, std::vector<std::vector<Array>>& outs) {
  const size_t nout = outs[0].size();
  const int n = mesh_.size();
  std::vector<int64_t> mine(nout * mesh_.local_size());
  for (int r = 0; r < mesh_.local_size(); ++r)
    for (size_t k = 0; k < nout; ++k) mine[r * nout + k] = static_cast<int64_t>(data_fingerprint(outs[r][k]));
  const std::vector<int64_t> all = gather_job(mine);
  for (size_t k = 0; k < nout; ++k) {
    std::string bad;
    for (int r = 1; r < n; ++r)
      if (all[r * nout + k] != all[k]) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
    if (bad.empty()) continue;
    std::string name = "output " + std::to_string(k);
    const OutTree& t = entry.out;
    if (k < t.leaf_dict.size() && t.leaf_dict[k] >= 0) {
      size_t j = 0;
      for (size_t i = 0; i < k; ++i) j += t.leaf_dict[i] == t.leaf_dict[k];
      name = "'" + t.dict_names[t.leaf_dict[k]][j] + "' (output " + std::to_string(k) + ")";
    }
    // steps_ already counts the step just run; steps are numbered from 0 as in check reports.
    std::string msg = "pmap '" + jit_.options().name + "': replicas diverged at step " +
                      std::to_string(steps_ - 1) + ": first diverging tensor " + name +
                      " differs from replica 0 on replica(s) " + bad;
    log().error("{}", msg);
    throw ReplicaMismatchError(msg);
  }
}

void PmapCore::find_plans(std::vector<FlatArgs>& args, const std::vector<uint64_t>& structure,
                          const std::vector<int64_t>& rows, const std::vector<int64_t>& job_rows,
                          const std::function<std::vector<std::string>(TraceContext&, int)>& params,
                          const TraceFn& trace) {
  trace_error_.clear();  // a trace again after a wrong assumption starts afresh
  const bool uneven = is_uneven(job_rows);
  uint64_t rows_key = 0x5bd1e995ull;
  for (int64_t n : job_rows) rows_key = mix(rows_key, static_cast<uint64_t>(n));
  for (int r = 0; r < mesh_.local_size(); ++r) {
    args[r].structure_hash = uneven ? mix(structure[r], rows_key) : structure[r];
    entries_[r] = jit_.find(args[r]);  // no std::function or tracing on a hit
    if (!entries_[r]) {
      try {
        entries_[r] = jit_.lookup(args[r], [&](TraceContext& ctx) {
          if (uneven) {
            ctx.shard_rows = job_rows;
            ctx.local_rows = rows[r];
          }
          return params(ctx, r);
        }, trace).get();
      } catch (const TraceError& e) {
        // One process alone: the error is the caller's at once. Across processes the others
        // are about to wait for this one in the program comparison: it goes there instead,
        // so that every process raises it.
        if (mesh_.process_comm() == nullptr) throw;
        if (trace_error_.empty()) trace_error_ = e.what();
      }
    }
  }
}

StepResult PmapCore::step(std::vector<FlatArgs>& args, std::vector<Array>& weights,
                          std::vector<std::vector<Array>>& outs, std::vector<int64_t> rows,
                          const std::vector<uint8_t>& sharded,
                          const std::function<std::vector<std::string>(TraceContext&, int)>& params,
                          const TraceFn& trace) {
  const int local = mesh_.local_size();
  entries_.resize(local);
  std::vector<uint64_t> structure(local);
  for (int r = 0; r < local; ++r) structure[r] = args[r].structure_hash;
  // An uneven split is part of what a replica's plan is compiled for. One process knows the
  // job's rows; across processes the last step's are assumed, and the program comparison's
  // gather says whether they still hold (if not, every process traces again and compares).
  const std::vector<int64_t> local_rows = rows;
  std::vector<int64_t> job_rows = mesh_.process_comm() == nullptr ? rows : job_rows_;
  find_plans(args, structure, local_rows, job_rows, params, trace);
  while (!compare_programs(entries_, rows, sharded, job_rows)) {
    job_rows = rows;
    rows = local_rows;
    find_plans(args, structure, local_rows, job_rows, params, trace);
  }
  job_rows_ = rows;
  for (int r = 0; r < local; ++r)
    if (entries_[r]) outs[r].resize(entries_[r]->exe->output_types.size());  // one Array per plan output
  int64_t total = 0;
  for (int64_t n : rows) total += n;
  const int first = mesh_.first_replica();
  for (int r = 0; r < local; ++r) {
    const int64_t mine = rows[first + r];
    weights[r].data<double>()[0] =
        total > 0 ? static_cast<double>(mine) * mesh_.size() / static_cast<double>(total) : 1.0;
  }
  std::vector<StepResult> results(local);
  std::vector<std::exception_ptr> errors(local);
  std::atomic<bool> cancelled{false};
  mesh_.pool().run([&](int r) {
    try {
      results[r] = jit_.run(*entries_[r], args[r], outs[r], &mesh_.comm(r), first + r, steps_);
    } catch (const std::exception& e) {
      errors[r] = std::current_exception();
      // Wake every replica of this process waiting in a collective of this step: nobody
      // hangs. (A backend that cannot cancel ends the whole job on an uncaught error.)
      if (local > 1 && mesh_.cancel(r, e.what())) cancelled = true;
    }
  });
  ++steps_;  // one step however many replicas ran it (JitCore::run counts nothing here)
  metrics().steps.fetch_add(1, std::memory_order_relaxed);
  if (results[0].skipped) metrics().steps_skipped.fetch_add(1, std::memory_order_relaxed);
  std::exception_ptr root;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveCancelled&) {
      if (!root) root = e;
    } catch (...) {
      root = e;
      break;
    }
  }
  if (root) {
    if (cancelled) mesh_.reset_communicators();
    std::rethrow_exception(root);
  }
  if (divergence_every_ > 0 && steps_ % divergence_every_ == 0) check_divergence(*entries_[0], outs);
  return results[0];
}

}  // namespace fjit
