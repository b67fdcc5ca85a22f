// Work that only the primary replica does (writing or reading a checkpoint), after which every
// process agrees on whether it failed: a failure on rank 0 fails every rank with the same
// story instead of leaving the others waiting in the next collective. The agreement is an
// all-reduce over the processes, so it doubles as a barrier: nobody goes on before rank 0 is done.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "parallel/mesh.h"

namespace fjit::training {

// Runs `work` on the primary replica's process; throws std::runtime_error on every process
// when it threw (its message on the primary, "<what> failed on rank 0" elsewhere).
inline void run_on_primary(const Mesh& mesh, const std::string& what, const std::function<void()>& work) {
  int failed = 0;
  std::string error;
  if (mesh.is_primary()) {
    try {
      work();
    } catch (const std::exception& e) {
      failed = 1;
      error = e.what();
    }
  }
  if (Communicator* pc = mesh.process_comm()) pc->all_reduce(&failed, 1, DType::i32, ReduceOp::max);
  if (failed) throw std::runtime_error(mesh.is_primary() ? error : what + " failed on rank 0");
}

// Process 0's string on every process (the replicas of one process share it already).
inline void broadcast_string(const Mesh& mesh, std::string& s) {
  Communicator* pc = mesh.process_comm();
  if (pc == nullptr) return;
  uint64_t size = s.size();
  pc->broadcast(&size, sizeof size, 0);
  s.resize(size);
  if (size > 0) pc->broadcast(s.data(), size, 0);
}

}  // namespace fjit::training
