#include "parallel/backends.h"

#include <cstdlib>
#include <stdexcept>

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
  if (const char* env = std::getenv("FJIT_BACKEND"); env != nullptr && *env != '\0')
    return find_backend(env, "FJIT_BACKEND").name;
  for (const Backend& b : backends())
    if (b.launched != nullptr && b.launched()) return b.name;
  return "threads";
}

}  // namespace fjit
