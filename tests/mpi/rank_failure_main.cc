// A tiny MPI program that fails on purpose, run by CTest through tests/mpi/expect_job_failure.cmake
// (see tests/mpi/failure_tests.cmake): the job must end with a non-zero exit within a bounded
// time, with the failing rank's message on the output, instead of hanging.
//
//   mpi_rank_failure throw R   rank R throws an uncaught exception after the first barrier;
//                              fjit's terminate handler logs it and calls MPI_Abort
//   mpi_rank_failure hang R    rank R never reaches the first barrier; the other ranks' stall
//                              inspector warns after FJIT_STALL_WARN_S and aborts the job
//                              after FJIT_STALL_ABORT_S, each time naming rank R and its host
//   mpi_rank_failure reduce-hang R
//                              the same in the second all-reduce (the first set up the
//                              shared-memory window, when the ranks share a machine)
//   mpi_rank_failure mismatch R
//                              rank R calls all_gather where the others call barrier: nobody
//                              is missing, and the stall report says where rank R waits
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/base/log.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"

int main(int argc, char** argv) {
  fjit::mpi_init_once(&argc, &argv);
  fjit::install_mpi_terminate_handler();
  const std::string mode = argc > 1 ? argv[1] : "";
  const int bad_rank = argc > 2 ? std::atoi(argv[2]) : 1;
  if (mode != "throw" && mode != "hang" && mode != "reduce-hang" && mode != "mismatch") {
    std::fprintf(stderr, "usage: mpi_rank_failure throw|hang|reduce-hang|mismatch RANK\n");
    return 2;
  }
  fjit::MpiCommunicator c;  // stall limits from FJIT_STALL_WARN_S / FJIT_STALL_ABORT_S
  const bool bad = c.rank() == bad_rank;
  auto hang = [] { std::this_thread::sleep_for(std::chrono::seconds(120)); };  // until killed
  if (mode == "reduce-hang") {
    float values[4] = {1, 2, 3, 4};
    c.all_reduce(values, 4, fjit::DType::f32, fjit::ReduceOp::sum);
    if (bad) hang();
    c.all_reduce(values, 4, fjit::DType::f32, fjit::ReduceOp::sum);
    return 0;
  }
  if (mode == "mismatch" && bad) {
    char mine = 0, all[64] = {};
    c.all_gather(&mine, all, 1);
    return 0;
  }
  if (mode == "hang" && bad) hang();
  c.barrier();
  if (mode == "throw" && c.rank() == bad_rank) {
    throw std::runtime_error(fmt::format("injected failure on rank {}", bad_rank));
  }
  c.barrier();  // the other ranks wait here until mpiexec ends them
  return 0;
}
