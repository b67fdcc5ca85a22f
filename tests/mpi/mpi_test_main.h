// The end of main() that the MPI tests share: every rank runs every test, only the primary
// rank prints, and every rank exits with failure when a test failed on any rank (so mpiexec
// and CTest see it whichever rank it was).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

namespace fjit::mpi_testing {

// REQUIRES: InitGoogleTest and MPI already initialised (by the test's mesh).
inline int run_all_tests_on_ranks(bool primary) {
  if (!primary) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}

}  // namespace fjit::mpi_testing
