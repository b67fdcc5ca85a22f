#include "parallel/mesh_grid.h"

#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "parallel/backends.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/shm_communicator.h"

namespace fjit {

Mesh make_thread_grid(std::vector<MeshAxis> axes) {
  const int n = mesh_axes_size(axes, "Mesh::threads");
  // The current groups (the whole mesh first, then every axis's), replaced after a cancel.
  auto groups = std::make_shared<std::vector<std::unique_ptr<ShmGroup>>>();
  Mesh::Parts p;
  p.backend = "threads";
  p.description = "threads";
  p.size = n;
  p.intra_op_threads = replica_intra_op_threads(n);
  p.axes = axes;
  p.make_communicators = [groups, axes, n] {
    groups->clear();
    groups->push_back(std::make_unique<ShmGroup>(n));
    // first[a]: the index in *groups of axis a's group 0.
    std::vector<size_t> first(axes.size());
    for (size_t a = 0; a < axes.size(); ++a) {
      first[a] = groups->size();
      for (int g = 0; g < n / axes[a].size; ++g) groups->push_back(std::make_unique<ShmGroup>(axes[a].size));
    }
    std::vector<std::shared_ptr<Communicator>> comms;
    for (int r = 0; r < n; ++r) {
      std::vector<std::shared_ptr<Communicator>> subs;
      for (size_t a = 0; a < axes.size(); ++a) {
        const auto [g, rank] = mesh_axis_group(axes, r, a);
        subs.push_back((*groups)[first[a] + static_cast<size_t>(g)]->communicator(rank));
      }
      comms.push_back(std::make_shared<MeshCommunicator>((*groups)[0]->communicator(r), axes, std::move(subs)));
    }
    return comms;
  };
  p.cancel = [groups](int rank, const std::string& reason) {
    for (auto& g : *groups) g->cancel(rank, reason);
  };
  return Mesh(std::move(p));
}

Mesh make_mpi_grid(std::vector<MeshAxis> axes, int* argc, char*** argv) {
  const int n = mesh_axes_size(axes, "Mesh::mpi");
  mpi_init_once(argc, argv);
  install_mpi_terminate_handler();
  auto world = std::make_shared<MpiCommunicator>();
  if (world->size() != n)
    throw std::invalid_argument(fmt::format("Mesh::mpi: the axes make a mesh of {} replicas, but the job has {} ranks",
                                            n, world->size()));
  const int me = world->rank();
  std::vector<std::shared_ptr<Communicator>> subs;
  for (size_t a = 0; a < axes.size(); ++a) {
    const auto [g, rank] = mesh_axis_group(axes, me, a);
    MPI_Comm split = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, g, rank, &split);
    subs.push_back(std::make_shared<MpiCommunicator>(split));  // it duplicates `split`
    MPI_Comm_free(&split);
  }
  auto mesh_comm = std::make_shared<MeshCommunicator>(world, axes, std::move(subs));
  Mesh::Parts p;
  p.backend = "mpi";
  p.description = "MPI ranks";
  p.size = n;
  p.first = me;
  p.processes = n;
  p.intra_op_threads = replica_intra_op_threads(mpi_local_ranks());
  p.process_comm = world;
  p.axes = std::move(axes);
  p.make_communicators = [mesh_comm] { return std::vector<std::shared_ptr<Communicator>>{mesh_comm}; };
  return Mesh(std::move(p));
}

}  // namespace fjit
