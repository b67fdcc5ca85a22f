// The backend registry: every way fjit can run a job's replicas, by name, in one table
// (backends.cc). Mesh::threads, Mesh::mpi and Mesh::from_environment all build through it, so
// nothing outside a backend's own files knows which backend runs.
//
// Adding a backend (say "gloo"):
//   1. parallel/gloo_backend.{h,cc}: a Communicator for its replicas, and a function
//      `Mesh make_gloo_mesh(int replicas, int* argc, char*** argv)` that fills Mesh::Parts
//      (sizes, this process's first replica, its communicators, the communicator among
//      processes) and, if its launcher can be recognised, `bool launched_under_gloo()`;
//   2. one line in kBackends (backends.cc): {"gloo", &launched_under_gloo, &make_gloo_mesh}.
#pragma once

#include <string>
#include <vector>

#include "parallel/mesh.h"

namespace fjit {

struct Backend {
  const char* name;
  // True when this process was started by the backend's launcher (null: never detected;
  // chosen only by name).
  bool (*launched)();
  // Builds this process's part of the job. `replicas` is the count asked for where the
  // backend decides it (threads); a backend whose launcher fixes it ignores it.
  Mesh (*make)(int replicas, int* argc, char*** argv);
};

// Every registered backend, in detection order.
const std::vector<Backend>& backends();

// The backend named `name`; std::invalid_argument listing the known names otherwise.
Mesh make_mesh(const std::string& name, int replicas, int* argc, char*** argv);

// FJIT_BACKEND when set (checked against the registry), else the first backend whose launcher
// started this process, else "threads".
std::string chosen_backend();

// The intra-op threads of each replica when `replicas_here` replicas share this machine, as a
// backend sets them at Mesh start-up: FJIT_INTRA_OP_THREADS when set (an integer from 1 to
// 4096; anything else throws std::invalid_argument naming it), else
// default_intra_op_threads(replicas_here) (core/base/threads.h).
int replica_intra_op_threads(int replicas_here);

}  // namespace fjit
