// The "mpi" backend: one replica per MPI rank (a job started by mpirun), over an
// MpiCommunicator on a duplicate of MPI_COMM_WORLD, which is also the communicator among the
// job's processes. A failed rank cannot be cancelled locally: the terminate handler turns an
// uncaught exception into MPI_Abort of the whole job.
#pragma once

#include "parallel/mesh.h"
#include "parallel/mpi_runtime.h"

namespace fjit {

// Initialises MPI (thread support requested) and installs the terminate handler. `replicas`
// is not used: the launcher fixed the number of ranks.
Mesh make_mpi_mesh(int replicas, int* argc, char*** argv);

}  // namespace fjit
