// The backends' meshes with named axes (Mesh::threads(axes), Mesh::mpi(axes)): every replica
// gets a MeshCommunicator over the whole mesh and one communicator per axis for its group.
#pragma once

#include <vector>

#include "parallel/mesh.h"

namespace fjit {

// Thread replicas: one ShmGroup for the whole mesh and one per group of every axis; a cancel
// cancels them all, and the next step gets fresh ones.
Mesh make_thread_grid(std::vector<MeshAxis> axes);
// One replica per MPI rank; each axis's groups are MPI_Comm_split of MPI_COMM_WORLD.
Mesh make_mpi_grid(std::vector<MeshAxis> axes, int* argc, char*** argv);

}  // namespace fjit
