// Mesh: the set of replicas a pmap runs on, as one process sees it: the replicas it runs
// (local), where they sit in the job (first_replica), and how the job's processes talk to
// each other. A backend (parallel/backends.h) builds it: N threads of this process (tests,
// one machine), or one replica per MPI rank (launched with mpirun). Callers never ask which:
// everything they need is a property below or a Communicator call.
//
// A Mesh is a cheap handle (copies share the replicas). Each local replica runs on a long-lived
// worker (ReplicaPool) with its own Communicator. Intra-op threads per replica
// (core/base/threads.h): the cores of the machine divided among the replicas that share it
// (threads of this process, or ranks on this host), at least 1; FJIT_INTRA_OP_THREADS overrides.
//
// A mesh made with named axes (Mesh::threads(axes), Mesh::mpi(axes)) lays the replicas out as
// a grid (parallel/mesh_axes.h); shard_map (parallel/shard_map.h) runs on it, and collectives
// name an axis. pmap takes a one-axis mesh only (std::invalid_argument otherwise).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/io/data.h"
#include "core/kernels/collective/communicator.h"
#include "core/trace/dict.h"
#include "parallel/mesh_axes.h"
#include "parallel/replica_pool.h"

namespace fjit {

class Mesh {
 public:
  // What a backend hands over to make a Mesh (parallel/backends.h).
  struct Parts {
    std::string backend;       // the registry's name: "threads", "mpi"
    std::string description;   // for messages: "threads", "MPI ranks"
    int size = 1;              // replicas in the whole job
    int first = 0;             // job-wide index of this process's first replica
    int processes = 1;         // processes in the job
    int intra_op_threads = 1;
    // One communicator per local replica; called again after a cancel for a fresh group.
    std::function<std::vector<std::shared_ptr<Communicator>>()> make_communicators;
    // Among the job's processes, one member each (rank = process index); null when the job
    // is this one process.
    std::shared_ptr<Communicator> process_comm;
    // Wakes every local replica waiting in a collective (they throw CollectiveCancelled);
    // null when a failed replica cannot be cancelled locally (its job is aborted instead).
    std::function<void(int rank, const std::string& reason)> cancel;
    // The named axes (product = size), whose communicators are MeshCommunicators; empty for
    // a mesh of one unnamed axis.
    std::vector<MeshAxis> axes;
  };
  explicit Mesh(Parts parts);

  // N thread replicas in this process (the "threads" backend). REQUIRES: n >= 1.
  static Mesh threads(int n);
  // One replica per MPI rank (the "mpi" backend); initialises MPI (thread support requested)
  // and installs the handler that turns an uncaught exception into MPI_Abort.
  static Mesh mpi(int* argc = nullptr, char*** argv = nullptr);
  // A mesh with named axes, row-major replica ids (parallel/mesh_axes.h): threads of this
  // process, or one replica per MPI rank (the job must have exactly the product of the sizes
  // ranks). Each axis's groups get communicators of their own (thread groups; MPI_Comm_split).
  // Bad axes (no name, a name twice, a size < 1, a rank count that differs) throw
  // std::invalid_argument.
  static Mesh threads(std::vector<MeshAxis> axes);
  static Mesh mpi(std::vector<MeshAxis> axes, int* argc = nullptr, char*** argv = nullptr);
  // The backend named by FJIT_BACKEND, else the first whose launcher started this process
  // (mpirun: "mpi"), else "threads" with N from `--replicas N` or `--replicas=N` (removed
  // from argv), else FJIT_REPLICAS, else 1. A count that is not an integer >= 1, or an unknown
  // backend name, is an std::invalid_argument naming where it came from.
  static Mesh from_environment(int& argc, char** argv);

  int size() const;           // replicas in the whole job
  int local_size() const;     // replicas in this process
  int first_replica() const;  // job-wide index of this process's replica 0
  int processes() const;      // processes in the job
  // The backend's name ("threads", "mpi") and how messages call its replicas.
  const std::string& backend() const;
  const std::string& description() const;
  // The communicator among the job's processes (one member each), or null for a one-process
  // job. What one process must agree on with the others goes through it.
  Communicator* process_comm() const;
  // The named axes (empty for a one-axis mesh); an axis's size, and replica `replica`'s
  // coordinate on it (job-wide replica ids). An unknown name throws std::invalid_argument.
  const std::vector<MeshAxis>& axes() const;
  int axis_size(const std::string& axis) const;
  int axis_index(const std::string& axis, int replica) const;
  // Threads each replica's kernels may use (core/base/threads.h).
  int intra_op_threads() const;
  // True in the process that holds replica 0 (the one that prints and writes checkpoints).
  bool is_primary() const { return first_replica() == 0; }

  Communicator& comm(int local) const;
  ReplicaPool& pool() const;
  // Makes every collective of this process's replicas throw CollectiveCancelled (a replica
  // failed). False when the backend cannot (then the failure ends the job).
  bool cancel(int rank, const std::string& reason) const;
  // After a cancel, makes new communicators for the next step.
  void reset_communicators() const;

  // Replica 0's values on every replica: a broadcast from process 0 over process_comm();
  // the replicas of one process already share them.
  ArrayDict replicate(const ArrayDict& values) const;
  Array replicate(const Array& value) const;

  // Splits a batch along axis 0 into this process's replicas' shards (row views of the
  // batch, no copy), as evenly as possible (sizes differ by at most 1; pmean weights them so
  // means stay exact). A batch with fewer rows than replicas (zero included: a process that
  // joined, parallel/join.h) leaves the last replicas zero rows, whose pmean weight is 0. A
  // process with one replica (an MPI rank) already holds its shard and gets it back unchanged.
  std::vector<Array> shard(const Array& batch) const;
  // Shard r's [begin, end) rows of a batch of `rows` over `parts` parts (io::split_rows).
  static std::pair<int64_t, int64_t> shard_range(int64_t rows, int parts, int r);
  // The replicas this process feeds, for io::BatchIterator: each process then reads only
  // its replicas' rows of every global batch (all of them for thread replicas).
  io::Shard data_shard() const { return {first_replica(), local_size(), size()}; }

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace fjit
