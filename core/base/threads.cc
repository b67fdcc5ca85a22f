#include "core/base/threads.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace fjit {

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
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, replicas_here));
}

}  // namespace fjit
