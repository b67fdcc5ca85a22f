#include "parallel/backends.h"

#include <stdexcept>

#include "core/base/config.h"
#include "core/base/threads.h"
#include "parallel/mpi_backend.h"
#include "parallel/thread_backend.h"

namespace fjit {

const std::vector<Backend>& backends() {
  static const std::vector<Backend> kBackends = {
      {"mpi", &launched_under_mpi, &make_mpi_mesh},
      {"threads", nullptr, &make_thread_mesh},
  };
  return kBackends;
}

namespace {

const Backend& find_backend(const std::string& name, const char* where) {
  std::string known;
  for (const Backend& b : backends()) {
    if (name == b.name) return b;
    known += std::string(known.empty() ? "" : ", ") + b.name;
  }
  throw std::invalid_argument(std::string(where) + ": unknown backend '" + name +
                              "' (known: " + known + ")");
}

}  // namespace

Mesh make_mesh(const std::string& name, int replicas, int* argc, char*** argv) {
  return find_backend(name, "make_mesh").make(replicas, argc, argv);
}

std::string chosen_backend() {
  if (const std::string name = config::backend(); !name.empty())
    return find_backend(name, "FJIT_BACKEND").name;
  for (const Backend& b : backends())
    if (b.launched != nullptr && b.launched()) return b.name;
  return "threads";
}

int replica_intra_op_threads(int replicas_here) {
  if (const int64_t n = config::intra_op_threads(); n > 0) return static_cast<int>(n);
  return default_intra_op_threads(replicas_here);
}

}  // namespace fjit
