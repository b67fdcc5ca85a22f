#include "parallel/mesh.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/runtime/env.h"
#include "core/runtime/threads.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/shm_communicator.h"

namespace fjit {

struct Mesh::State {
  bool mpi = false;
  int size = 1;
  int first = 0;
  std::unique_ptr<ReplicaPool> pool;
  mutable std::unique_ptr<ShmGroup> group;
  mutable std::vector<std::unique_ptr<Communicator>> comms;
};

Mesh Mesh::threads(int n) {
  if (n < 1) throw std::invalid_argument("Mesh::threads: need at least one replica, got " + std::to_string(n));
  Mesh m;
  m.state_ = std::make_shared<State>();
  m.state_->size = n;
  m.state_->pool = std::make_unique<ReplicaPool>(n, default_intra_op_threads(n));
  m.reset_communicators();
  return m;
}

Mesh Mesh::mpi(int* argc, char*** argv) {
  mpi_init_once(argc, argv);
  install_mpi_terminate_handler();
  Mesh m;
  m.state_ = std::make_shared<State>();
  m.state_->mpi = true;
  m.state_->pool = std::make_unique<ReplicaPool>(1, default_intra_op_threads(mpi_local_ranks()));
  m.state_->comms.push_back(std::make_unique<MpiCommunicator>());
  m.state_->size = m.state_->comms[0]->size();
  m.state_->first = m.state_->comms[0]->rank();
  return m;
}

Mesh Mesh::from_environment(int& argc, char** argv) {
  if (launched_under_mpi()) return mpi(&argc, &argv);
  std::string spec;
  const char* from = "FJIT_REPLICAS";
  if (const char* env = std::getenv("FJIT_REPLICAS")) spec = env;
  // `--replicas N` or `--replicas=N`, removed from argv.
  for (int i = 1; i < argc; ++i) {
    int used = 0;
    if (std::strcmp(argv[i], "--replicas") == 0 && i + 1 < argc) {
      spec = argv[i + 1], used = 2;
    } else if (std::strncmp(argv[i], "--replicas=", 11) == 0) {
      spec = argv[i] + 11, used = 1;
    }
    if (used == 0) continue;
    from = "--replicas";
    for (int j = i; j + used <= argc; ++j) argv[j] = argv[j + used];
    argc -= used;
    break;
  }
  return threads(spec.empty() ? 1 : parse_count(spec, std::string("Mesh::from_environment: ") + from, 1024));
}

int Mesh::size() const { return state_->size; }
int Mesh::local_size() const { return state_->mpi ? 1 : state_->size; }
int Mesh::first_replica() const { return state_->first; }
bool Mesh::is_mpi() const { return state_->mpi; }
Communicator& Mesh::comm(int local) const { return *state_->comms.at(local); }
ReplicaPool& Mesh::pool() const { return *state_->pool; }
int Mesh::intra_op_threads() const { return state_->pool->intra_op_threads(); }

void Mesh::reset_communicators() const {
  if (state_->mpi) return;
  state_->comms.clear();
  state_->group = std::make_unique<ShmGroup>(state_->size);
  for (int r = 0; r < state_->size; ++r) state_->comms.push_back(state_->group->communicator(r));
}

void Mesh::cancel(int rank, const std::string& reason) const {
  if (state_->group) state_->group->cancel(rank, reason);
}

Array Mesh::replicate(const Array& value) const {
  if (!state_->mpi || state_->size == 1) return value;
  Array out = value.clone();
  comm(0).broadcast(out.raw(), out.nbytes(), 0);
  return out;
}

ArrayDict Mesh::replicate(const ArrayDict& values) const {
  ArrayDict out;
  for (const auto& kv : values) out.set(kv.first, replicate(kv.second));
  return out;
}

std::pair<int64_t, int64_t> Mesh::shard_range(int64_t rows, int parts, int r) {
  const int64_t base = rows / parts, extra = rows % parts;
  const int64_t begin = r * base + std::min<int64_t>(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

std::vector<Array> Mesh::shard(const Array& batch) const {
  if (state_->mpi) return {batch};
  if (batch.rank() == 0) throw std::invalid_argument("Mesh::shard: cannot shard a scalar");
  const int n = local_size();
  if (batch.shape()[0] < n)
    throw std::invalid_argument("Mesh::shard: batch of " + std::to_string(batch.shape()[0]) +
                                " rows cannot feed " + std::to_string(n) + " replicas");
  // Row views of the batch: sharding copies nothing.
  std::vector<Array> out;
  for (int r = 0; r < n; ++r) {
    auto [b, e] = shard_range(batch.shape()[0], n, r);
    out.push_back(batch.rows(b, e));
  }
  return out;
}

}  // namespace fjit
