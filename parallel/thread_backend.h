// The "threads" backend: N replicas as threads of this process, talking through shared memory
// (ShmGroup). A failed replica cancels the group, and the next step gets a fresh one.
#pragma once

#include "parallel/mesh.h"

namespace fjit {

// REQUIRES: replicas >= 1 (std::invalid_argument otherwise). argc/argv are not used.
Mesh make_thread_mesh(int replicas, int* argc, char*** argv);

}  // namespace fjit
