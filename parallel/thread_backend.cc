#include "parallel/thread_backend.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "parallel/backends.h"
#include "parallel/shm_communicator.h"

namespace fjit {

Mesh make_thread_mesh(int replicas, int*, char***) {
  if (replicas < 1)
    throw std::invalid_argument("Mesh::threads: need at least one replica, got " + std::to_string(replicas));
  // The current group, replaced after a cancel; shared by the Parts' functions.
  auto group = std::make_shared<std::unique_ptr<ShmGroup>>();
  Mesh::Parts p;
  p.backend = "threads";
  p.description = "threads";
  p.size = replicas;
  p.intra_op_threads = replica_intra_op_threads(replicas);
  p.make_communicators = [group, replicas] {
    *group = std::make_unique<ShmGroup>(replicas);
    std::vector<std::shared_ptr<Communicator>> comms;
    for (int r = 0; r < replicas; ++r) comms.push_back((*group)->communicator(r));
    return comms;
  };
  p.cancel = [group](int rank, const std::string& reason) {
    if (*group) (*group)->cancel(rank, reason);
  };
  return Mesh(std::move(p));
}

}  // namespace fjit
