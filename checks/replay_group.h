// ReplayGroup: N thread replicas of one process that replay a multi-replica step together
// (checks/replay.h). Each replica gets a Communicator of the group; collectives meet in memory.
//
// Promises:
//  - Reductions combine in rank order 0, 1, ..., N-1 in the element type with the rules of
//    the real backends (parallel/communicator_reduce.h: sums in IEEE order, i32 wrapping,
//    booleans as logical_or, NaN sticky in max/min), so a replayed collective gives the
//    bits it gave in the run. Supported element types: f32, f64, i32, boolean, u8, u32; an
//    all_reduce of another dtype throws std::runtime_error naming it.
//  - On a mesh with named axes (axis_sizes given, row-major as parallel/mesh_axes.h lays the
//    replicas out), a member's for_axis(name) is its communicator among the replicas that
//    share its coordinates on the other axes, its rank there its coordinate on the axis.
//  - Never hangs: when a replica leaves with an error (fail()) or a collective waits longer
//    than the group's timeout, every waiting replica throws std::runtime_error saying so.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/kernels/collective/communicator.h"

namespace fjit {

class ReplayGroup {
 public:
  explicit ReplayGroup(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // `size` replicas on a mesh whose axes are `axis_names` with sizes `axis_sizes` (empty: one
  // group for every axis). Throws std::invalid_argument when the sizes do not multiply to
  // `size` or do not match the names.
  ReplayGroup(int size, const std::vector<std::string>& axis_names, const std::vector<int>& axis_sizes,
              std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~ReplayGroup();
  ReplayGroup(const ReplayGroup&) = delete;
  ReplayGroup& operator=(const ReplayGroup&) = delete;

  int size() const;
  // Replica `rank`'s communicator, owned by the group.
  Communicator& member(int rank);
  // Replica `rank` stopped with `why`: the others' collectives throw instead of waiting.
  void fail(int rank, const std::string& why);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace fjit
