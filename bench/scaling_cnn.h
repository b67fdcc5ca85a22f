// The CNN half of bench/scaling_bench.cc: weak scaling of the training step of the examples'
// CNN (examples/lib/models.h: conv3x3(32)-ReLU-maxpool2, conv3x3(64)-ReLU-maxpool2,
// conv3x3(128)-ReLU-maxpool2, dropout 0.3, dense 128-ReLU, dropout, dense 10), AdamW,
// kCnnBatch images per replica, 1 vs 2 replicas, as threads and as MPI ranks.
//
// Rows:
//   cnn 1              pmap on Mesh::threads(1) (rank 0 alone under MPI): t(1) of every row
//   cnn threads 2      pmap on Mesh::threads(2), gradients and loss pmean'd
//   cnn threads sync   the ceiling for threads (see below), two SyncThreads replicas
//   cnn MPI 2          pmap on Mesh::mpi() with 2 ranks
//   ... schedule       cnn threads 2 / cnn MPI 2 with each all-reduce placed as soon as its
//                      gradients exist (Overlap::schedule)
//   ... worker         the same on each replica's collective worker (Overlap::worker; under
//                      MPI as schedule unless FJIT_OVERLAP=1 was set at start-up)
//   cnn MPI sync       the ceiling for MPI, one replica per rank, MPI_Barrier a step
// There is no hand-written CNN step, so the CNN's "sync only" ceiling is built from fjit's own
// compute: every replica runs the one-replica fjit step with its gradients left local (no
// all-reduce, no pmap across replicas) and the replicas meet at one barrier per step with no
// data. That is the ceiling of any synchronous data-parallel step that does this compute; it
// says nothing about how fast fjit's compute itself is.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/scaling_rows.h"
#include "parallel/mesh.h"

namespace fjit::bench {

inline constexpr int64_t kCnnBatch = 16;  // per replica
// A block of steps stays well under a second at this batch.
inline constexpr int kCnnSteps = 8, kCnnWarm = 2;

class CnnScaling {
 public:
  // Builds and compiles the steps: every rank calls it (under MPI `mpi_mesh` is Mesh::mpi()
  // and the MPI step is compiled collectively; without MPI it is unused).
  CnnScaling(const Ranks& ranks, const Mesh& mpi_mesh, int intra_op_threads);
  ~CnnScaling();

  // Times every row, `rounds` interleaved rounds of kCnnSteps steps. Every rank calls it.
  void time(int rounds);
  const std::vector<Row>& rows() const;
  // Rank 0 prints the efficiency rows (after print_efficiency_header()).
  void print_efficiencies() const;
  // Rank 0 prints the RESULT lines of fjit against the ceiling.
  void print_ceilings(double target) const;
  // Where a step of the 2-replica fjit row went. Every rank calls it.
  void print_breakdown() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fjit::bench
