// PmapCore: the type-erased runtime behind pmap(). One JitCore (one compile cache) serves
// every replica; each step:
//   1. every local replica looks up (or compiles) the plan for its shard's signature;
//   2. replicas compare a fingerprint of what they traced (input and output dtypes and ranks,
//      every collective with its exact shape; see program_fingerprint) — threads locally, MPI ranks with one small all-gather that
//      also carries each rank's shard size. Different programs fail on every replica at once
//      with an error showing each replica's program, instead of deadlocking in a collective;
//   3. every replica runs the plan on its thread/rank with its communicator; shard weights
//      (n_r * R / N; 0 for a zero-row shard) feed pmean so uneven batches give exact means;
//   4. optionally every K steps, replicas compare fingerprints of their outputs (parameters
//      and optimizer state) and fail naming the first diverging tensor.
// A replica that throws cancels the thread group so no other replica waits forever; the
// root-cause exception (not the cancellations it caused) is rethrown on the caller.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/runtime/jit_core.h"
#include "parallel/mesh.h"

namespace fjit {

struct PmapOptions {
  JitOptions jit;
  // Compare output fingerprints across replicas every K steps; 0 = off. Default:
  // FJIT_DIVERGENCE_CHECK_EVERY (0 or an integer from 1 to 2^30; anything else makes the
  // PmapCore constructor throw std::invalid_argument naming it), else 0.
  int divergence_check_every = -1;
};

// Thrown on every replica when replicas traced different programs or diverged.
struct ReplicaMismatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PmapCore {
 public:
  // On a mesh with named axes (shard_map) `axis` is not used: the trace's axes are the mesh's.
  PmapCore(Mesh mesh, std::string axis, PmapOptions options);

  // One step. args[r] are local replica r's flattened arguments, the last leaf being its f32
  // scalar weight (filled here). outs[r] receive replica r's outputs. `params`/`trace` are as
  // for JitCore::lookup and are only called on a cache miss, on the calling thread.
  // rows[r] is the number of examples in replica r's shard (0 when nothing is sharded).
  // sharded[i] says whether leaf i is split along axis 0 (its leading extent may differ
  // between replicas; every other extent of every input must agree).
  StepResult step(std::vector<FlatArgs>& args, std::vector<Array>& weights,
                  std::vector<std::vector<Array>>& outs, std::vector<int64_t> rows,
                  const std::vector<uint8_t>& sharded,
                  const std::function<std::vector<std::string>(TraceContext&, int replica)>& params,
                  const TraceFn& trace);

  const Mesh& mesh() const { return mesh_; }
  JitCore& jit() { return jit_; }
  const std::string& axis() const { return axis_; }
  std::shared_ptr<const CompiledEntry> last_entry() const { return jit_.last_entry(); }
  // The plan local replica `local` ran in the last step (its outputs' structure).
  const CompiledEntry& entry(int local) const { return *entries_[local]; }

 private:
  std::vector<int64_t> gather_job(const std::vector<int64_t>& local_words) const;
  // This process's first tracing error of the current step (MPI: reported by every rank).
  std::string trace_error_;
  // Traces or finds local replica plans, compiled for the job's shard rows `job_rows` when
  // they are uneven (all_gather concatenates the real shards).
  void find_plans(std::vector<FlatArgs>& args, const std::vector<uint64_t>& structure,
                  const std::vector<int64_t>& rows, const std::vector<int64_t>& job_rows,
                  const std::function<std::vector<std::string>(TraceContext&, int replica)>& params,
                  const TraceFn& trace);
  // Gathers every replica's program fingerprint and rows (rows: from this process's replicas'
  // to the job's). False, before any comparison, when the job's rows are not `assumed` and
  // the plans depend on which they are (uneven either way): every process sees the same and
  // traces again. Otherwise throws when the replicas traced different programs.
  bool compare_programs(const std::vector<const CompiledEntry*>& entries, std::vector<int64_t>& rows,
                        const std::vector<uint8_t>& sharded, const std::vector<int64_t>& assumed);
  void check_divergence(const CompiledEntry& entry, std::vector<std::vector<Array>>& outs);

  Mesh mesh_;
  std::string axis_;
  int divergence_every_;
  JitCore jit_;
  int64_t steps_ = 0;
  std::vector<const CompiledEntry*> entries_;  // per local replica, reused
  // The job's shard rows of the last step, which the next assumes before the program
  // comparison gathers the real ones: one meeting a step while the split does not change.
  std::vector<int64_t> job_rows_;
};

// The fingerprint of a compiled program that replicas must agree on, and its description.
// `sharded` (by input leaf; shorter means unsharded) leaves out the split axis of those
// inputs; every other extent, dtype and rank of every input counts.
uint64_t program_fingerprint(const CompiledEntry& entry, const std::vector<uint8_t>& sharded = {});
std::string program_description(const CompiledEntry& entry);
// A fast fingerprint of an array's bytes (for divergence checks).
uint64_t data_fingerprint(const Array& a);

}  // namespace fjit
