#include "core/base/threads.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/base/env.h"

namespace fjit {
namespace {

// FJIT_INTRA_OP_THREADS as a count, or 0 when unset.
int env_threads() {
  const char* s = std::getenv("FJIT_INTRA_OP_THREADS");
  if (s == nullptr || *s == '\0') return 0;
  return parse_count(s, "FJIT_INTRA_OP_THREADS", 4096);
}

}  // namespace

void set_intra_op_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_intra_op_threads: n must be >= 1, got " + std::to_string(n));
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

int intra_op_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int default_intra_op_threads(int replicas_here) {
  if (const int n = env_threads(); n > 0) return n;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, replicas_here));
}

}  // namespace fjit
