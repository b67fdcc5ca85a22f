// Process-wide MPI set-up: detecting mpiexec, initialising once, failing loudly.
//
// Promises:
//  - launched_under_mpi() is true exactly when the process was started by an MPI launcher
//    (OpenMPI, or any PMI/PMIx one), without initialising MPI.
//  - mpi_init_once() initialises MPI at most once per process, asking for
//    MPI_THREAD_FUNNELED (collectives come from one thread), or MPI_THREAD_SERIALIZED when
//    FJIT_OVERLAP is 1 or worker (a rank's collectives then come from its collective worker,
//    one thread at a time), needing at least MPI_THREAD_FUNNELED; and finalises it at exit
//    unless someone else already has.
//  - install_mpi_terminate_handler(): an uncaught exception on any rank logs its what() and
//    calls MPI_Abort(MPI_COMM_WORLD, 1), so mpiexec exits non-zero instead of the other ranks
//    hanging forever in their next collective.
#pragma once

#include <mpi.h>

namespace fjit {

bool launched_under_mpi();

// Safe to call from several places; only the first call initialises. argc/argv may be null.
// Aborts the process with a message if MPI cannot give MPI_THREAD_FUNNELED.
void mpi_init_once(int* argc = nullptr, char*** argv = nullptr);

// True between a successful MPI_Init and MPI_Finalize.
bool mpi_active();

// Whether MPI, as initialised (by fjit or by the user), lets any thread call it, one at a
// time (MPI_THREAD_SERIALIZED or more). False when MPI is not active.
bool mpi_serialized_threads();

// MPI_COMM_WORLD rank, or 0 when MPI is not active.
int mpi_world_rank();

// How many ranks of MPI_COMM_WORLD share this rank's machine (1 when MPI is not active).
int mpi_local_ranks();

// Installs the std::terminate handler described above (idempotent). Call after
// mpi_init_once(); before MPI is active the handler just logs and aborts.
void install_mpi_terminate_handler();

}  // namespace fjit
