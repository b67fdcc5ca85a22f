// Mesh: the set of replicas a pmap runs on. Either N threads of this process (tests, one
// machine) or one replica per MPI rank (launched with mpirun), chosen from the environment.
//
// A Mesh is a cheap handle (copies share the replicas). Threads get long-lived workers
// (ReplicaPool) and a shared-memory communicator group; MPI ranks get an MpiCommunicator over
// a duplicate of MPI_COMM_WORLD. Intra-op threads per replica (core/threads.h): the cores of
// the machine divided among the replicas that share it (threads of this process, or MPI ranks
// on this host), at least 1; FJIT_INTRA_OP_THREADS overrides.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/trace/dict.h"
#include "core/runtime/communicator.h"
#include "parallel/replica_pool.h"

namespace fjit {

class Mesh {
 public:
  // N thread replicas in this process. REQUIRES: n >= 1.
  static Mesh threads(int n);
  // One replica per MPI rank; initialises MPI (thread support requested) and installs the
  // handler that turns an uncaught exception into MPI_Abort.
  static Mesh mpi(int* argc = nullptr, char*** argv = nullptr);
  // Under mpirun: mpi(). Otherwise threads(N) with N from `--replicas N` or `--replicas=N`
  // (removed from argv), else FJIT_REPLICAS, else 1. A count that is not an integer >= 1 is
  // an std::invalid_argument naming where it came from.
  static Mesh from_environment(int& argc, char** argv);

  int size() const;           // replicas in the whole job
  int local_size() const;     // replicas in this process
  int first_replica() const;  // job-wide index of this process's replica 0
  bool is_mpi() const;
  // Threads each replica's kernels may use (core/threads.h).
  int intra_op_threads() const;
  // True in the process that holds replica 0 (the one that prints and writes checkpoints).
  bool is_primary() const { return first_replica() == 0; }

  Communicator& comm(int local) const;
  ReplicaPool& pool() const;
  // Makes every collective of the thread group throw CollectiveCancelled (a replica failed).
  void cancel(int rank, const std::string& reason) const;
  // After a cancel, makes a new thread group for the next step.
  void reset_communicators() const;

  // Replica 0's values on every replica: an MPI broadcast from rank 0; threads already share.
  ArrayDict replicate(const ArrayDict& values) const;
  Array replicate(const Array& value) const;

  // Splits a batch along axis 0 into this process's replicas' shards (threads: row views of
  // the batch, no copy), as evenly as possible (sizes differ by at most 1; pmean weights them
  // so means stay exact). Under MPI each rank already holds its shard and gets it back
  // unchanged.
  std::vector<Array> shard(const Array& batch) const;
  // Shard r's [begin, end) rows of a batch of `rows` over `parts` parts.
  static std::pair<int64_t, int64_t> shard_range(int64_t rows, int parts, int r);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fjit
