// Named mesh axes: a job's replicas laid out as a grid, for example {{"data", 2}, {"model", 2}}
// (Mesh::threads / Mesh::mpi with axes, parallel/mesh.h). Replica ids are row-major: the last
// axis varies fastest, so on that mesh replicas 0 and 1 share data coordinate 0 and differ on
// "model". A collective over one axis runs among the replicas that share every other
// coordinate (that axis's group), through MeshCommunicator::for_axis.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/kernels/collective/communicator.h"

namespace fjit {

struct MeshAxis {
  std::string name;
  int size = 1;
};

// Throws std::invalid_argument (naming `where`) unless every axis has a distinct non-empty
// name and a size >= 1. Returns the product of the sizes.
int mesh_axes_size(const std::vector<MeshAxis>& axes, const char* where);
// The index of `name` in axes, or -1.
int mesh_axis_position(const std::vector<MeshAxis>& axes, const std::string& name);
// Replica `replica`'s coordinate on every axis.
std::vector<int> mesh_coords(const std::vector<MeshAxis>& axes, int replica);
// The group of `replica` on axis `a`: which group it is (0 .. size / axes[a].size - 1, in
// order of the other coordinates) and its rank in it (its coordinate on a).
std::pair<int, int> mesh_axis_group(const std::vector<MeshAxis>& axes, int replica, size_t a);

// One replica's communicator on a mesh with named axes: collectives called on it directly go
// over the whole mesh (the step's check flags, pmap's program comparison); for_axis(name)
// answers the group of that axis.
class MeshCommunicator final : public Communicator {
 public:
  // `subs[i]` is this replica's communicator in its group of axes[i].
  MeshCommunicator(std::shared_ptr<Communicator> full, std::vector<MeshAxis> axes,
                   std::vector<std::shared_ptr<Communicator>> subs);

  Communicator* for_axis(const std::string& axis) override;

  int rank() const override { return full_->rank(); }
  int size() const override { return full_->size(); }
  std::string backend() const override { return full_->backend(); }
  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    full_->all_reduce(data, count, dtype, op);
  }
  void all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype, void* ctx,
                        ReducedBlockFn apply) override {
    full_->all_reduce_apply(src, scratch, count, dtype, ctx, apply);
  }
  void reserve_shared_workspace(size_t bytes) override { full_->reserve_shared_workspace(bytes); }
  void* shared_workspace(size_t bytes) override { return full_->shared_workspace(bytes); }
  bool callable_from_any_thread() const override;
  void broadcast(void* data, size_t nbytes, int root) override { full_->broadcast(data, nbytes, root); }
  void all_gather(const void* send, void* recv, size_t nbytes_per_rank) override {
    full_->all_gather(send, recv, nbytes_per_rank);
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    full_->reduce_scatter(send, recv, count, dtype, op);
  }
  void all_to_all(const void* send, void* recv, size_t nbytes_per_rank) override {
    full_->all_to_all(send, recv, nbytes_per_rank);
  }
  void permute(const void* send, void* recv, size_t nbytes, int send_to, int recv_from) override {
    full_->permute(send, recv, nbytes, send_to, recv_from);
  }
  void all_gather_uneven(const void* send, void* recv, const int64_t* bytes_per_rank) override {
    full_->all_gather_uneven(send, recv, bytes_per_rank);
  }
  void barrier() override { full_->barrier(); }
  [[noreturn]] void abort_job(const std::string& message) override;

 private:
  std::shared_ptr<Communicator> full_;
  std::vector<MeshAxis> axes_;
  std::vector<std::shared_ptr<Communicator>> subs_;
};

}  // namespace fjit
