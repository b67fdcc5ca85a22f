// The TSan run's canary (TSan builds only; CTest expects it to fail): two OpenMP workers of one
// parallel region write the same variables with nothing ordering them. ThreadSanitizer must
// report it and the process must exit non-zero, which shows that the OpenMP annotations
// (tsan_openmp.cc) order only what OpenMP orders and a race inside fjit's parallel regions
// still fails the run.
//
// TSan does not report every racing pair: it drops a race whose earlier access it cannot
// place (a single racing pair went unreported in about one run of six here, with or without
// the annotations). So the canary races on many variables over several regions; one report
// is enough, and the chance that all of them are dropped is nil.
#include <omp.h>

#include <cstdio>

int main() {
  constexpr int kCells = 64;
  constexpr int kRegions = 8;
  static volatile long shared[kCells] = {};
  for (int region = 0; region < kRegions; ++region) {
#pragma omp parallel num_threads(2)
    {
      for (int i = 0; i < kCells; ++i)
        shared[i] = shared[i] + omp_get_thread_num() + 1;  // unordered
    }
  }
  long sum = 0;
  for (int i = 0; i < kCells; ++i) sum += shared[i];
  std::printf("sum = %ld\n", sum);
  return 0;
}
