#include "parallel/mesh_axes.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

namespace fjit {

int mesh_axes_size(const std::vector<MeshAxis>& axes, const char* where) {
  if (axes.empty()) throw std::invalid_argument(fmt::format("{}: a mesh needs at least one axis", where));
  int64_t n = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const MeshAxis& a = axes[i];
    if (a.name.empty()) throw std::invalid_argument(fmt::format("{}: axis {} has no name", where, i));
    if (a.size < 1)
      throw std::invalid_argument(fmt::format("{}: axis '{}' has size {} (need >= 1)", where, a.name, a.size));
    for (size_t j = 0; j < i; ++j)
      if (axes[j].name == a.name) throw std::invalid_argument(fmt::format("{}: axis '{}' named twice", where, a.name));
    n *= a.size;
    if (n > (1 << 20)) throw std::invalid_argument(fmt::format("{}: the mesh has too many replicas", where));
  }
  return static_cast<int>(n);
}

int mesh_axis_position(const std::vector<MeshAxis>& axes, const std::string& name) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<int> mesh_coords(const std::vector<MeshAxis>& axes, int replica) {
  std::vector<int> c(axes.size());
  for (size_t i = axes.size(); i-- > 0;) {
    c[i] = replica % axes[i].size;
    replica /= axes[i].size;
  }
  return c;
}

std::pair<int, int> mesh_axis_group(const std::vector<MeshAxis>& axes, int replica, size_t a) {
  const std::vector<int> c = mesh_coords(axes, replica);
  int group = 0;
  for (size_t i = 0; i < axes.size(); ++i)
    if (i != a) group = group * axes[i].size + c[i];
  return {group, c[a]};
}

MeshCommunicator::MeshCommunicator(std::shared_ptr<Communicator> full, std::vector<MeshAxis> axes,
                                   std::vector<std::shared_ptr<Communicator>> subs)
    : full_(std::move(full)), axes_(std::move(axes)), subs_(std::move(subs)) {}

Communicator* MeshCommunicator::for_axis(const std::string& axis) {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return subs_[i].get();
  return this;  // not a mesh axis: the whole mesh (the trace has checked the names)
}

void MeshCommunicator::abort_job(const std::string& message) {
  full_->abort_job(message);
  std::abort();  // not reached: abort_job never returns
}

bool MeshCommunicator::callable_from_any_thread() const {
  bool ok = full_->callable_from_any_thread();
  for (const auto& s : subs_) ok = ok && s->callable_from_any_thread();
  return ok;
}

}  // namespace fjit
