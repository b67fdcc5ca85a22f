#include "parallel/mpi_backend.h"

#include <memory>

#include "parallel/backends.h"
#include "parallel/mpi_communicator.h"

namespace fjit {

Mesh make_mpi_mesh(int, int* argc, char*** argv) {
  mpi_init_once(argc, argv);
  install_mpi_terminate_handler();
  auto comm = std::make_shared<MpiCommunicator>();
  Mesh::Parts p;
  p.backend = "mpi";
  p.description = "MPI ranks";
  p.size = comm->size();
  p.first = comm->rank();
  p.processes = comm->size();
  p.intra_op_threads = replica_intra_op_threads(mpi_local_ranks());
  p.process_comm = comm;
  // A rank runs one replica, whose communicator is the one among processes.
  p.make_communicators = [comm] { return std::vector<std::shared_ptr<Communicator>>{comm}; };
  return Mesh(std::move(p));
}

}  // namespace fjit
