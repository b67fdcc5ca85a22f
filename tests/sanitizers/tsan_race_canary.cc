// The TSan run's canary (TSan builds only; CTest expects it to fail): two OpenMP workers of one
// parallel region write the same variable with nothing ordering them. ThreadSanitizer must
// report it and the process must exit non-zero, which shows that the OpenMP annotations
// (tsan_openmp.cc) order only what OpenMP orders and a race inside fjit's parallel regions
// still fails the run.
#include <omp.h>

#include <cstdio>

int main() {
  static volatile long shared = 0;
#pragma omp parallel num_threads(2)
  {
    shared = shared + omp_get_thread_num() + 1;  // both threads, unordered
  }
  std::printf("shared = %ld\n", static_cast<long>(shared));
  return 0;
}
