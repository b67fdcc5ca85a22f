// Weak scaling from 1 to 2 replicas of two training steps, each against the ceiling that this
// machine allows a synchronous step, measured in the same run:
//   MLP 784-512-512-10 (value_and_grad + pmean of the gradients + SGD, as examples/lib
//   does), batch 128 per replica, and the step time against the gradient bucket size
//   (FJIT_FUSION_BYTES);
//   the examples' CNN with AdamW, batch 16 per replica (bench/scaling_cnn.h).
//
//   build/bench/scaling_bench [--model mlp|cnn|all] [rounds] [steps]     (thread backend)
//   mpiexec -n 2 --allow-run-as-root --bind-to none build/bench/scaling_bench [same]   (MPI)
// `steps` is the MLP's block; the CNN's is kCnnSteps. One intra-op thread per replica unless
// FJIT_INTRA_OP_THREADS says otherwise (weak scaling is per core).
//
// Efficiency = t(1 replica) / t(2 replicas), the median of each round's own ratio. The target
// (issue 18) is relative: fjit's efficiency at least kTarget times its ceiling's, both taken
// in the same round, for each model and backend. On 2 cores no synchronous step reaches full
// efficiency: two busy cores share caches, memory and clocks, and every step waits for its
// slower replica. MLP rows:
//   fjit threads   pmap on Mesh::threads(1), batch 128 vs Mesh::threads(2), global batch 256
//   threads, no comm  the same without pmean (gradients stay local): pmap's own cost
//   hand threads, sync only  the ceiling for threads: a hand-written Eigen step
//                  (bench/scaling_hand_mlp.h) on 1 thread vs on 2 SyncThreads replicas, each
//                  with its own data, meeting at fjit's own barrier once a step, no data
//   fjit MPI       pmap on Mesh::threads(1) in rank 0 alone (the plan a 1-rank job runs; its
//                  all-reduce is a no-op) vs pmap on Mesh::mpi() with 2 ranks, 128 per rank
//   fjit MPI, no comm  the same without pmean: pmap still meets once a step (its all-gather
//                  of program fingerprints)
//   ..., schedule  fjit threads / fjit MPI with each all-reduce placed as soon as its
//                  gradients exist (FJIT_OVERLAP=schedule)
//   ..., worker    the same with the all-reduces on each replica's collective worker thread
//                  while the backward pass goes on (FJIT_OVERLAP=1). Under MPI the worker
//                  needs MPI_THREAD_SERIALIZED, which fjit asks for only when FJIT_OVERLAP=1 is
//                  set at start-up: without it this row runs as "schedule" (the row says so)
//   hand MPI       the hand-written step, gradients in one flat buffer reduced with one
//                  MPI_Allreduce (2 ranks) or not reduced (rank 0 alone)
//   hand, no comm  the same step on 2 ranks without any reduction or meeting
//   hand, sync only  the ceiling for MPI: the same with one MPI_Barrier a step and no data
// "others (1, 2)": the CPU that other processes used during the 1- and the 2-replica blocks,
// in cores (median over the rounds); well above 0, a tenant took cores and the row's
// figures are the tenant's as much as fjit's. Rounds in which it took more than kBusyOthers
// during a block compared are left out of that comparison ("rounds": those kept).
// Thread rows are printed by the run without mpiexec only (under it the other rank would
// take the second core from thread replica 1), MPI rows by the run under it. While rank 0
// runs a one-process row, the other rank sleeps in a paced wait. Rows of one model are
// interleaved round by round (bench/scaling_rows.h); a breakdown says where a step of the
// 2-replica fjit rows went. The machine this was written on has 2 cores, so 2 replicas have
// one core each: the 1-replica baseline runs on an otherwise idle second core.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/scaling_cnn.h"
#include "bench/scaling_hand_mlp.h"
#include "bench/scaling_rows.h"
#include "bench/scaling_sync_threads.h"
#include "core/lib/initializers.h"
#include "core/base/threads.h"
#include "parallel/backends.h"
#include "parallel/fjit.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/pmap.h"

using namespace fjit;
using namespace fjit::bench;

namespace {

const std::vector<int64_t> kSizes = {784, 512, 512, 10};
constexpr int64_t kBatch = 128;
constexpr double kLr = 0.01;
constexpr double kTarget = 0.97;  // fjit's efficiency over its ceiling's
constexpr int kWarmSteps = 3;

Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);
  h = relu(matmul(h, p["w2"]) + p["b2"]);
  return mean(softmax_cross_entropy(matmul(h, p["w3"]) + p["b3"], y));
}

// The training step as a user writes it; its bucket size is the pmap's option (else
// FJIT_FUSION_BYTES, read when the pmap is made).
// reduce = false leaves the gradients local: what the step costs on 2 replicas without any
// communication (a diagnostic, not a correct data-parallel step).
struct StepFn {
  bool reduce = true;
  std::tuple<TensorDict, Tensor> operator()(const Params& p, const Tensor& x,
                                            const Tensor& y) const {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    if (!reduce) return {sgd(p, g, kLr), loss};
    return {sgd(p, pmean(g, "batch"), kLr), pmean(loss, "batch")};
  }
};
// overlap: the all-reduces run on each replica's collective worker, overlapping the rest of
// the backward pass (core/compile/schedule.h).
// fusion_bytes > 0: the gradient bucket size (JitOptions::fusion_bytes).
auto make_step(const Mesh& mesh, bool reduce, Overlap overlap = Overlap::off,
               int64_t fusion_bytes = 0) {
  PmapOptions o;
  o.jit.overlap = overlap;
  if (fusion_bytes > 0) o.jit.fusion_bytes = fusion_bytes;
  return pmap(mesh, "batch", StepFn{reduce}, o);
}
using Step = decltype(make_step(Mesh::threads(1), true));

Array batch_x(int64_t rows, uint64_t seed) { return he_uniform({rows, kSizes.front()}, seed); }
Array batch_y(int64_t rows) {
  Array y(DType::i32, {rows});
  for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
  return y;
}

// One pmap training loop with double-buffered parameters (no allocation once warm).
struct FjitRunner {
  Step step;
  ArrayDict params;
  std::tuple<ArrayDict, Array> out;
  Array x, y;

  FjitRunner(const Mesh& mesh, int64_t rows, int64_t fusion_bytes, bool reduce = true,
             Overlap overlap = Overlap::off)
      : step(make_step(mesh, reduce, overlap, fusion_bytes)),
        params(mesh.replicate(mlp_params(kSizes, 1))),
        x(batch_x(rows, 2)),
        y(batch_y(rows)) {
    run(2);  // traces and compiles
  }
  void run(int steps) {
    for (int i = 0; i < steps; ++i) {
      step.run_into(out, params, x, y);
      std::swap(params, std::get<0>(out));
    }
  }
  int buckets() {
    int n = 0;
    for (const Node& node : step.core().last_entry()->exe->graph->nodes()) {
      n += node.op == Op::AllReduce && !node.shape.empty();  // not the loss's
    }
    return n;
  }
};

// The hand-written step with its own data: one per replica.
struct HandReplica {
  FlatHandMlp mlp{kSizes, kBatch};
  Array x = batch_x(kBatch, 2), y = batch_y(kBatch);
  void step(const FlatHandMlp::Reduce& reduce = nullptr) {
    mlp.step(x.data<float>(), y.data<int32_t>(), kLr, reduce);
  }
};

int64_t mib(double m) { return static_cast<int64_t>(m * (1 << 20)); }

struct Args {
  bool mlp = true, cnn = true;
  int rounds = 15;  // many short rounds: the blocks of a round run close together in time
  int steps = 10;
};

bool parse(int argc, char** argv, Args* a) {
  std::vector<int> numbers;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m != "mlp" && m != "cnn" && m != "all") return false;
      a->mlp = m != "cnn";
      a->cnn = m != "mlp";
    } else {
      numbers.push_back(std::max(1, std::atoi(argv[i])));
    }
  }
  if (numbers.size() > 2) return false;
  if (numbers.size() > 0) a->rounds = numbers[0];
  if (numbers.size() > 1) a->steps = numbers[1];
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Weak scaling is per core: one kernel thread per replica, for fjit and the hand step alike.
  if (!config::is_set(config::Id::intra_op_threads)) setenv("FJIT_INTRA_OP_THREADS", "1", 1);
  const int intra = replica_intra_op_threads(1);  // what Mesh start-up gives each replica
  set_intra_op_threads(intra);  // the hand step on this thread (Eigen's GEMM uses OpenMP)
  Ranks ranks;
  ranks.mpi = launched_under_mpi();
  Mesh mpi_mesh = Mesh::threads(1);
  if (ranks.mpi) {
    mpi_mesh = Mesh::mpi(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &ranks.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks.size);
    if (ranks.size != 2) {
      if (ranks.rank == 0) std::fprintf(stderr, "scaling_bench: run with mpiexec -n 2\n");
      return 2;
    }
  }
  Args args;
  if (!parse(argc, argv, &args)) {
    if (ranks.rank == 0)
      std::fprintf(stderr, "usage: scaling_bench [--model mlp|cnn|all] [rounds] [steps]\n");
    return 2;
  }
  std::unique_ptr<MpiCommunicator> idle;
  if (ranks.mpi) {
    StallPolicy patient;
    patient.warn_after = patient.abort_after = std::chrono::milliseconds(0);
    idle = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, patient);
    ranks.idle = idle.get();
  }

  // Meshes and runners are built on every rank (rank 0 alone runs the one-process rows).
  Mesh one = Mesh::threads(1), two = Mesh::threads(2);
  std::vector<Row> scaling;
  std::unique_ptr<FjitRunner> thr1, thr2, thr2_local, thr2_schedule, thr2_worker, mpi2, mpi2_local,
      mpi2_schedule, mpi2_worker;
  HandReplica hand[2];
  std::unique_ptr<SyncThreads> sync;
  if (args.mlp) {
    thr1 = std::make_unique<FjitRunner>(one, kBatch, 0);
    scaling.emplace_back("fjit threads 1", false, [&](int n) { thr1->run(n); });
    scaling.emplace_back("hand 1", false, [&](int n) {
      for (int i = 0; i < n; ++i) hand[0].step();
    });
  }
  if (args.mlp && !ranks.mpi) {
    thr2 = std::make_unique<FjitRunner>(two, 2 * kBatch, 0);
    thr2_local = std::make_unique<FjitRunner>(two, 2 * kBatch, 0, false);
    thr2_schedule = std::make_unique<FjitRunner>(two, 2 * kBatch, 0, true, Overlap::schedule);
    thr2_worker = std::make_unique<FjitRunner>(two, 2 * kBatch, 0, true, Overlap::worker);
    sync = std::make_unique<SyncThreads>(2, intra);
    scaling.emplace_back("fjit threads 2", false, [&](int n) { thr2->run(n); });
    scaling.emplace_back("fjit threads 2 local", false, [&](int n) { thr2_local->run(n); });
    scaling.emplace_back("fjit threads 2 schedule", false, [&](int n) { thr2_schedule->run(n); });
    scaling.emplace_back("fjit threads 2 worker", false, [&](int n) { thr2_worker->run(n); });
    scaling.emplace_back("hand threads 2 barrier", false, [&](int n) {
      sync->run([&](int r) {
        for (int i = 0; i < n; ++i) {
          hand[r].step();
          sync->barrier(r);
        }
      });
    });
  }
  if (args.mlp && ranks.mpi) {
    mpi2 = std::make_unique<FjitRunner>(mpi_mesh, kBatch, 0);
    mpi2_local = std::make_unique<FjitRunner>(mpi_mesh, kBatch, 0, false);
    mpi2_schedule = std::make_unique<FjitRunner>(mpi_mesh, kBatch, 0, true, Overlap::schedule);
    mpi2_worker = std::make_unique<FjitRunner>(mpi_mesh, kBatch, 0, true, Overlap::worker);
    scaling.emplace_back("fjit MPI 2", true, [&](int n) { mpi2->run(n); });
    scaling.emplace_back("fjit MPI 2 local", true, [&](int n) { mpi2_local->run(n); });
    scaling.emplace_back("fjit MPI 2 schedule", true, [&](int n) { mpi2_schedule->run(n); });
    scaling.emplace_back("fjit MPI 2 worker", true, [&](int n) { mpi2_worker->run(n); });
    scaling.emplace_back("hand MPI 2", true, [&](int n) {
      for (int i = 0; i < n; ++i)
        hand[1].step([](float* g, int64_t count) {
          MPI_Allreduce(MPI_IN_PLACE, g, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
          for (int64_t k = 0; k < count; ++k) g[k] *= 0.5f;
        });
    });
    scaling.emplace_back("hand 2 no reduce", true, [&](int n) {
      for (int i = 0; i < n; ++i) hand[1].step();
    });
    scaling.emplace_back("hand 2 barrier", true, [&](int n) {
      for (int i = 0; i < n; ++i) {
        hand[1].step();
        MPI_Barrier(MPI_COMM_WORLD);
      }
    });
  }
  time_rows(scaling, ranks, args.rounds, args.steps, kWarmSteps);

  std::unique_ptr<CnnScaling> cnn;
  if (args.cnn) {
    cnn = std::make_unique<CnnScaling>(ranks, mpi_mesh, intra);
    cnn->time(args.rounds);
  }

  // Bucket size: a 784-512-512-10 MLP has 669706 f32 gradients (2.55 MiB).
  std::vector<Row> buckets;
  std::vector<std::unique_ptr<FjitRunner>> keep;
  std::vector<int> nbuckets;
  const double sizes_mib[] = {0.25, 1, 4, 64};
  for (double m : sizes_mib) {
    if (!args.mlp) break;
    keep.push_back(std::make_unique<FjitRunner>(two, 2 * kBatch, mib(m)));
    FjitRunner* t = keep.back().get();
    nbuckets.push_back(t->buckets());
    buckets.emplace_back("threads", false, [t](int n) { t->run(n); });
    if (ranks.mpi) {
      keep.push_back(std::make_unique<FjitRunner>(mpi_mesh, kBatch, mib(m)));
      FjitRunner* r = keep.back().get();
      buckets.emplace_back("MPI", true, [r](int n) { r->run(n); });
    }
  }
  time_rows(buckets, ranks, args.rounds, args.steps, kWarmSteps);

  if (ranks.rank == 0) {
    std::printf(
        "weak scaling, 1 vs 2 replicas, %d intra-op thread(s) each, %d interleaved "
        "rounds (efficiency: median of the rounds' own t(1)/t(2), over the rounds in which "
        "other processes took at most %.1f cores)\n",
        intra, args.rounds, kBusyOthers);
    print_efficiency_header();
  }
  if (args.mlp && ranks.rank == 0) {
    std::printf("MLP 784-512-512-10, SGD, batch %lld per replica, blocks of %d steps\n",
                static_cast<long long>(kBatch), args.steps);
    const Row &fjit1 = row(scaling, "fjit threads 1"), &hand1 = row(scaling, "hand 1");
    if (!ranks.mpi) {
      print_efficiency_line("fjit threads", fjit1, row(scaling, "fjit threads 2"));
      print_efficiency_line("threads, no comm", fjit1, row(scaling, "fjit threads 2 local"));
      print_efficiency_line("fjit threads, schedule", fjit1, row(scaling, "fjit threads 2 schedule"));
      print_efficiency_line("fjit threads, worker", fjit1, row(scaling, "fjit threads 2 worker"));
      print_efficiency_line("hand threads, sync only", hand1,
                            row(scaling, "hand threads 2 barrier"));
    } else {
      const std::string worker_name =
          mpi_serialized_threads() ? "fjit MPI, worker" : "fjit MPI, worker (as schedule)";
      print_efficiency_line("fjit MPI", fjit1, row(scaling, "fjit MPI 2"));
      print_efficiency_line("fjit MPI, no comm", fjit1, row(scaling, "fjit MPI 2 local"));
      print_efficiency_line("fjit MPI, schedule", fjit1, row(scaling, "fjit MPI 2 schedule"));
      print_efficiency_line(worker_name.c_str(), fjit1, row(scaling, "fjit MPI 2 worker"));
      print_efficiency_line("hand MPI", hand1, row(scaling, "hand MPI 2"));
      print_efficiency_line("hand, no comm", hand1, row(scaling, "hand 2 no reduce"));
      print_efficiency_line("hand, sync only", hand1, row(scaling, "hand 2 barrier"));
    }
  }
  if (cnn) cnn->print_efficiencies();

  if (ranks.rank == 0) {
    std::printf(
        "\nfjit's efficiency over its ceiling's (\"sync only\"), per round, median and "
        "quartiles of the rounds\n");
    if (args.mlp) {
      const Row &fjit1 = row(scaling, "fjit threads 1"), &hand1 = row(scaling, "hand 1");
      const char* sync_row = ranks.mpi ? "hand 2 barrier" : "hand threads 2 barrier";
      const std::string two_rows = ranks.mpi ? "fjit MPI 2" : "fjit threads 2";
      const std::string name = !ranks.mpi ? "MLP threads"
                               : mpi_serialized_threads() ? "MLP MPI (MPI_THREAD_SERIALIZED)"
                                                          : "MLP MPI";
      print_ceiling_line(name.c_str(), fjit1, row(scaling, two_rows), hand1, row(scaling, sync_row), kTarget);
      for (const char* mode : {"schedule", "worker"})
        print_ceiling_line((name + ", overlap " + mode).c_str(), fjit1,
                           row(scaling, two_rows + " " + mode), hand1, row(scaling, sync_row), kTarget);
    }
  }
  if (cnn) cnn->print_ceilings(kTarget);

  if (args.mlp) print_breakdown(row(scaling, ranks.mpi ? "fjit MPI 2" : "fjit threads 2"), ranks);
  if (cnn) cnn->print_breakdown();
  if (args.mlp && ranks.rank == 0) {
    std::printf("\nMLP step time vs gradient bucket size (2 replicas, batch 128 each)\n");
    std::printf("%10s %8s %14s%s\n", "bucket MiB", "buckets", "threads ms",
                ranks.mpi ? "         MPI ms" : "");
    const size_t per = ranks.mpi ? 2 : 1;
    for (size_t i = 0; i < std::size(sizes_mib); ++i) {
      std::printf("%10.2f %8d %14.3f", sizes_mib[i], nbuckets[i], median(buckets[i * per].ms));
      if (ranks.mpi) std::printf(" %14.3f", median(buckets[i * per + 1].ms));
      std::printf("\n");
    }
  }
  return 0;
}
