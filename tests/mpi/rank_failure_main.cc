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
//   mpi_rank_failure kernel-sleep R
//                              a pmap step in which rank R sleeps inside its matmul (the
//                              executor's test seam, which polls as a long kernel does): the
//                              others wait in the psum, and the report says what each does
//   mpi_rank_failure collective-sleep R
//                              the same, rank R asleep just before its psum
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/base/log.h"
#include "core/compile/kernel_sleep_testing.h"
#include "fjit.h"
#include "parallel/pmap.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"

namespace {

int sleep_in_a_step(const std::string& mode, int bad_rank, int argc, char** argv) {
  using namespace fjit;
  Mesh mesh = Mesh::mpi(&argc, &argv);
  auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& x) {
    return std::tuple{psum(sum(matmul(x, p["w"])), "batch")};
  });
  ArrayDict w;
  w.set("w", Array::full(DType::f32, {3, 5}, 0.5));
  const ArrayDict p = mesh.replicate(w);
  const Array x = Array::full(DType::f32, {2, 3}, 1.0);
  step(p, x);
  if (mesh.first_replica() == bad_rank)
    testing::sleep_in_kernel(bad_rank, mode == "kernel-sleep" ? Op::MatMul : Op::AllReduce, 120);
  step(p, x);  // the others wait in the psum until the job is aborted
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fjit::mpi_init_once(&argc, &argv);
  fjit::install_mpi_terminate_handler();
  const std::string mode = argc > 1 ? argv[1] : "";
  const int bad_rank = argc > 2 ? std::atoi(argv[2]) : 1;
  if (mode != "throw" && mode != "hang" && mode != "reduce-hang" && mode != "mismatch" &&
      mode != "kernel-sleep" && mode != "collective-sleep") {
    std::fprintf(stderr, "usage: mpi_rank_failure throw|hang|reduce-hang|mismatch|kernel-sleep|collective-sleep RANK\n");
    return 2;
  }
  if (mode == "kernel-sleep" || mode == "collective-sleep") return sleep_in_a_step(mode, bad_rank, argc, argv);
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
