// All-reduce (sum, f32) from 4 KiB to 64 MiB: the thread backend with 2 replicas, fjit's MPI
// backend and plain MPI_Allreduce, in one binary.
//
//   ./allreduce_bench                                   thread backend only
//   mpiexec -n 2 --allow-run-as-root ./allreduce_bench  all three; rank 0 reports
//
// Google Benchmark decides iteration counts from timings, which differ between ranks, so only
// rank 0 runs the benchmark library; before each timed loop it broadcasts what to run and how
// many times, and the other ranks follow that command in a plain loop.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/shm_communicator.h"

namespace {

using fjit::DType;
using fjit::ReduceOp;

constexpr int64_t kMinBytes = 4 << 10;
constexpr int64_t kMaxBytes = 64 << 20;

// Google Benchmark divides a threaded run's time by the iterations of all threads together,
// which halves a collective's latency with two replicas. us_per_call is the latency of one
// call as each replica sees it, measured the same way for every backend.
template <class Loop>
void timed(benchmark::State& state, Loop&& loop) {
  const auto start = std::chrono::steady_clock::now();
  loop();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      static_cast<double>(state.iterations());
  state.counters["us_per_call"] = benchmark::Counter(us, benchmark::Counter::kAvgThreads);
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// ---- thread backend: benchmark's own threads are the replicas --------------------------

fjit::ShmGroup& thread_group() {
  static fjit::ShmGroup group(2, fjit::StallPolicy{});
  return group;
}

void BM_ThreadAllReduce(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  std::unique_ptr<fjit::Communicator> comm = thread_group().communicator(state.thread_index());
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  timed(state, [&] {
    for (auto _ : state) {
      comm->all_reduce(buf.data(), n, DType::f32, ReduceOp::sum);
      benchmark::DoNotOptimize(buf.data());
    }
  });
}
BENCHMARK(BM_ThreadAllReduce)->RangeMultiplier(4)->Range(kMinBytes, kMaxBytes)
    ->Threads(2)->UseRealTime()->Unit(benchmark::kMicrosecond)->ComputeStatistics("min", min_of);

// ---- MPI: rank 0 leads, the others follow ------------------------------------------------

enum Kind : int64_t { kStop = 0, kFjit = 1, kPlain = 2 };
struct Command {
  int64_t kind = kStop;
  int64_t bytes = 0;
  int64_t iterations = 0;
};

fjit::MpiCommunicator* g_mpi = nullptr;
// Commands travel over a communicator with its own stall timer: a follower waiting for the
// next command sleeps instead of spinning, so it does not steal a core from the thread
// benchmarks running on rank 0. Its limits are off: that wait may be long.
fjit::MpiCommunicator* g_control = nullptr;

struct MpiBuffers {
  std::vector<float> data;
  void resize(int64_t bytes) { data.assign(static_cast<size_t>(bytes / 4), 1.0f); }
};

void run_once(Kind kind, MpiBuffers& b) {
  const int n = static_cast<int>(b.data.size());
  if (kind == kFjit) {
    g_mpi->all_reduce(b.data.data(), n, DType::f32, ReduceOp::sum);
  } else {
    MPI_Allreduce(MPI_IN_PLACE, b.data.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

void follow() {
  MpiBuffers b;
  for (;;) {
    Command c;
    g_control->broadcast(&c, sizeof c, 0);
    if (c.kind == kStop) return;
    b.resize(c.bytes);
    run_once(Kind::kFjit, b);  // warm-up: grows fjit's scratch, as on the leader
    run_once(static_cast<Kind>(c.kind), b);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int64_t i = 0; i < c.iterations; ++i) run_once(static_cast<Kind>(c.kind), b);
  }
}

void lead(benchmark::State& state, Kind kind) {
  Command c{kind, state.range(0), static_cast<int64_t>(state.max_iterations)};
  g_control->broadcast(&c, sizeof c, 0);
  MpiBuffers b;
  b.resize(c.bytes);
  run_once(Kind::kFjit, b);
  run_once(kind, b);
  MPI_Barrier(MPI_COMM_WORLD);
  timed(state, [&] {
    for (auto _ : state) run_once(kind, b);
  });
}

void BM_FjitMpiAllReduce(benchmark::State& state) { lead(state, kFjit); }
void BM_PlainMpiAllreduce(benchmark::State& state) { lead(state, kPlain); }

}  // namespace

int main(int argc, char** argv) {
  const bool mpi = fjit::launched_under_mpi();
  int rank = 0;
  int size = 1;
  if (mpi) {
    fjit::mpi_init_once(&argc, &argv);
    fjit::install_mpi_terminate_handler();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    g_mpi = new fjit::MpiCommunicator(MPI_COMM_WORLD, fjit::StallPolicy{});
    fjit::StallPolicy no_limits;
    no_limits.warn_after = no_limits.abort_after = std::chrono::milliseconds(0);
    g_control = new fjit::MpiCommunicator(MPI_COMM_WORLD, no_limits);
  }
  if (rank != 0) {
    follow();
  } else {
    if (size > 1) {
      for (auto* b : {benchmark::RegisterBenchmark("BM_FjitMpiAllReduce", BM_FjitMpiAllReduce),
                      benchmark::RegisterBenchmark("BM_PlainMpiAllreduce", BM_PlainMpiAllreduce)}) {
        b->RangeMultiplier(4)->Range(kMinBytes, kMaxBytes)->Unit(benchmark::kMicrosecond)
            ->ComputeStatistics("min", min_of);
      }
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (mpi) {
      Command stop;
      g_control->broadcast(&stop, sizeof stop, 0);
    }
  }
  delete g_control;
  delete g_mpi;
  return 0;
}
