#include "parallel/mesh.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/base/config.h"
#include "core/base/env.h"
#include "parallel/backends.h"
#include "parallel/mesh_grid.h"

namespace fjit {
namespace {
constexpr int kMaxReplicas = static_cast<int>(config::row(config::Id::replicas).max);
}  // namespace

struct Mesh::State {
  Parts parts;
  int local = 1;
  std::unique_ptr<ReplicaPool> pool;
  mutable std::vector<std::shared_ptr<Communicator>> comms;
};

Mesh::Mesh(Parts parts) : state_(std::make_shared<State>()) {
  state_->parts = std::move(parts);
  state_->comms = state_->parts.make_communicators();
  state_->local = static_cast<int>(state_->comms.size());
  state_->pool = std::make_unique<ReplicaPool>(state_->local, state_->parts.intra_op_threads);
}

Mesh Mesh::threads(int n) { return make_mesh("threads", n, nullptr, nullptr); }

Mesh Mesh::mpi(int* argc, char*** argv) { return make_mesh("mpi", 1, argc, argv); }

Mesh Mesh::threads(std::vector<MeshAxis> axes) { return make_thread_grid(std::move(axes)); }

Mesh Mesh::mpi(std::vector<MeshAxis> axes, int* argc, char*** argv) {
  return make_mpi_grid(std::move(axes), argc, argv);
}

const std::vector<MeshAxis>& Mesh::axes() const { return state_->parts.axes; }

int Mesh::axis_size(const std::string& axis) const {
  const int a = mesh_axis_position(axes(), axis);
  if (a < 0) throw std::invalid_argument("Mesh::axis_size: the mesh has no axis '" + axis + "'");
  return axes()[a].size;
}

int Mesh::axis_index(const std::string& axis, int replica) const {
  const int a = mesh_axis_position(axes(), axis);
  if (a < 0) throw std::invalid_argument("Mesh::axis_index: the mesh has no axis '" + axis + "'");
  return mesh_coords(axes(), replica)[a];
}

Mesh Mesh::from_environment(int& argc, char** argv) {
  std::string spec;
  bool given = false;
  // `--replicas N` or `--replicas=N`, removed from argv.
  for (int i = 1; i < argc; ++i) {
    int used = 0;
    if (std::strcmp(argv[i], "--replicas") == 0 && i + 1 < argc) {
      spec = argv[i + 1], used = 2;
    } else if (std::strncmp(argv[i], "--replicas=", 11) == 0) {
      spec = argv[i] + 11, used = 1;
    }
    if (used == 0) continue;
    given = true;
    for (int j = i; j + used <= argc; ++j) argv[j] = argv[j + used];
    argc -= used;
    break;
  }
  const std::string backend = chosen_backend();
  int replicas = 1;
  if (given) {
    if (!spec.empty())
      replicas = parse_count(spec, "Mesh::from_environment: --replicas", kMaxReplicas);
  } else {
    try {  // FJIT_REPLICAS, when no --replicas overrides it
      replicas = static_cast<int>(config::replicas());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("Mesh::from_environment: ") + e.what());
    }
  }
  return make_mesh(backend, replicas, &argc, &argv);
}

int Mesh::size() const { return state_->parts.size; }
int Mesh::local_size() const { return state_->local; }
int Mesh::first_replica() const { return state_->parts.first; }
int Mesh::processes() const { return state_->parts.processes; }
const std::string& Mesh::backend() const { return state_->parts.backend; }
const std::string& Mesh::description() const { return state_->parts.description; }
Communicator* Mesh::process_comm() const { return state_->parts.process_comm.get(); }
Communicator& Mesh::comm(int local) const { return *state_->comms.at(local); }
ReplicaPool& Mesh::pool() const { return *state_->pool; }
int Mesh::intra_op_threads() const { return state_->pool->intra_op_threads(); }

void Mesh::reset_communicators() const { state_->comms = state_->parts.make_communicators(); }

bool Mesh::cancel(int rank, const std::string& reason) const {
  if (!state_->parts.cancel) return false;
  state_->parts.cancel(rank, reason);
  return true;
}

Array Mesh::replicate(const Array& value) const {
  Communicator* pc = process_comm();
  if (pc == nullptr || pc->size() == 1) return value;
  Array out = value.clone();
  pc->broadcast(out.raw(), out.nbytes(), 0);
  return out;
}

ArrayDict Mesh::replicate(const ArrayDict& values) const {
  ArrayDict out;
  for (const auto& kv : values) out.set(kv.first, replicate(kv.second));
  return out;
}

std::pair<int64_t, int64_t> Mesh::shard_range(int64_t rows, int parts, int r) {
  return io::split_rows(rows, parts, r);
}

std::vector<Array> Mesh::shard(const Array& batch) const {
  const int n = local_size();
  if (n == 1 && processes() > 1) return {batch};  // this process's replica holds its shard
  if (batch.rank() == 0) throw std::invalid_argument("Mesh::shard: cannot shard a scalar");
  // Row views of the batch: sharding copies nothing.
  std::vector<Array> out;
  for (int r = 0; r < n; ++r) {
    auto [b, e] = shard_range(batch.shape()[0], n, r);
    out.push_back(batch.rows(b, e));
  }
  return out;
}

}  // namespace fjit
