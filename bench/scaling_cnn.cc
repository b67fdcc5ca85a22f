#include "bench/scaling_cnn.h"

#include <mpi.h>

#include <cstdio>
#include <string>
#include <tuple>

#include "bench/scaling_sync_threads.h"
#include "examples/lib/models.h"
#include "parallel/fjit.h"
#include "parallel/pmap.h"

namespace fjit::bench {
namespace {

using examples::ModelKind;
using examples::ModelSpec;

ModelSpec cnn_spec() {
  ModelSpec s;
  s.kind = ModelKind::cnn;
  s.dropout = 0.3;  // as train_cnn and bench/model_step.cc
  return s;
}

// The training step as a user writes it (parallel/train/train_step.cc's, without its checks and
// learning-rate schedule). The dropout key differs by replica, not by step: the bench only
// needs the compute. reduce = false leaves the gradients and loss local.
struct CnnStepFn {
  bool reduce = true;
  std::tuple<TensorDict, TensorDict, Tensor> operator()(const Params& p, const Params& state,
                                                        const Tensor& x, const Tensor& y) const {
    const Tensor key = fold_in(PRNGKey(7), axis_index("batch"));
    auto loss_fn = [&](const Params& q) {
      return mean(softmax_cross_entropy(examples::model_logits(cnn_spec(), q, x, true, key), y));
    };
    auto [loss, g] = value_and_grad(loss_fn)(p);
    if (reduce) g = pmean(g, "batch");
    auto [next, next_state] = AdamW{}.update(p, g, state);
    return {next, next_state, reduce ? pmean(loss, "batch") : loss};
  }
};

PmapOptions options(Overlap overlap) {
  PmapOptions o;
  o.jit.overlap = overlap;
  return o;
}

// One pmap'd CNN training loop with double-buffered parameters and state.
struct CnnRunner {
  Pmapped<CnnStepFn> step;
  ArrayDict params, state;
  std::tuple<ArrayDict, ArrayDict, Array> out;
  Array x, y;

  CnnRunner(const Mesh& mesh, int64_t rows, bool reduce, Overlap overlap = Overlap::off)
      : step(pmap(mesh, "batch", CnnStepFn{reduce}, options(overlap))),
        params(mesh.replicate(examples::init_model(cnn_spec(), 1))),
        state(AdamW{}.init_state(params)),
        x(DType::u8, {rows, 28 * 28}),
        y(DType::i32, {rows}) {
    for (int64_t i = 0; i < x.size(); ++i) x.data<u8_t>()[i] = u8_t{static_cast<uint8_t>(i * 37)};
    for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
    run(2);  // traces and compiles; afterwards both buffers are in the step's output order
  }
  void run(int steps) {
    for (int i = 0; i < steps; ++i) {
      step.run_into(out, params, state, x, y);
      std::swap(params, std::get<0>(out));
      std::swap(state, std::get<1>(out));
    }
  }
};

}  // namespace

struct CnnScaling::Impl {
  Ranks ranks;
  std::unique_ptr<CnnRunner> one, threads2, mpi2, threads2_schedule, mpi2_schedule, threads2_worker,
      mpi2_worker;
  std::unique_ptr<CnnRunner> local[2];  // the ceiling's one-replica steps, gradients local
  std::unique_ptr<SyncThreads> sync;
  std::vector<Row> rows;
};

CnnScaling::CnnScaling(const Ranks& ranks, const Mesh& mpi_mesh, int intra_op_threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ranks = ranks;
  const Mesh one = Mesh::threads(1);
  m.one = std::make_unique<CnnRunner>(one, kCnnBatch, true);
  m.rows.emplace_back("cnn 1", false, [&m](int n) { m.one->run(n); });
  if (!ranks.mpi) {
    m.threads2 = std::make_unique<CnnRunner>(Mesh::threads(2), 2 * kCnnBatch, true);
    for (auto& l : m.local) l = std::make_unique<CnnRunner>(Mesh::threads(1), kCnnBatch, false);
    m.sync = std::make_unique<SyncThreads>(2, intra_op_threads);
    m.threads2_schedule = std::make_unique<CnnRunner>(Mesh::threads(2), 2 * kCnnBatch, true, Overlap::schedule);
    m.threads2_worker = std::make_unique<CnnRunner>(Mesh::threads(2), 2 * kCnnBatch, true, Overlap::worker);
    m.rows.emplace_back("cnn threads 2", false, [&m](int n) { m.threads2->run(n); });
    m.rows.emplace_back("cnn threads 2 schedule", false, [&m](int n) { m.threads2_schedule->run(n); });
    m.rows.emplace_back("cnn threads 2 worker", false, [&m](int n) { m.threads2_worker->run(n); });
    m.rows.emplace_back("cnn threads sync", false, [&m](int n) {
      m.sync->run([&m, n](int r) {
        for (int i = 0; i < n; ++i) {
          m.local[r]->run(1);
          m.sync->barrier(r);
        }
      });
    });
  } else {
    m.mpi2 = std::make_unique<CnnRunner>(mpi_mesh, kCnnBatch, true);
    m.local[0] = std::make_unique<CnnRunner>(one, kCnnBatch, false);
    m.mpi2_schedule = std::make_unique<CnnRunner>(mpi_mesh, kCnnBatch, true, Overlap::schedule);
    m.mpi2_worker = std::make_unique<CnnRunner>(mpi_mesh, kCnnBatch, true, Overlap::worker);
    m.rows.emplace_back("cnn MPI 2", true, [&m](int n) { m.mpi2->run(n); });
    m.rows.emplace_back("cnn MPI 2 schedule", true, [&m](int n) { m.mpi2_schedule->run(n); });
    m.rows.emplace_back("cnn MPI 2 worker", true, [&m](int n) { m.mpi2_worker->run(n); });
    m.rows.emplace_back("cnn MPI sync", true, [&m](int n) {
      for (int i = 0; i < n; ++i) {
        m.local[0]->run(1);
        MPI_Barrier(MPI_COMM_WORLD);
      }
    });
  }
}

CnnScaling::~CnnScaling() = default;

void CnnScaling::time(int rounds) {
  time_rows(impl_->rows, impl_->ranks, rounds, kCnnSteps, kCnnWarm);
}

const std::vector<Row>& CnnScaling::rows() const { return impl_->rows; }

void CnnScaling::print_efficiencies() const {
  const std::vector<Row>& rows = impl_->rows;
  if (impl_->ranks.rank != 0) return;
  std::printf(
      "CNN (examples/lib/models.h, dropout 0.3), AdamW, batch %lld per replica, blocks of "
      "%d steps\n",
      static_cast<long long>(kCnnBatch), kCnnSteps);
  const Row& one = row(rows, "cnn 1");
  if (!impl_->ranks.mpi) {
    print_efficiency_line("fjit threads", one, row(rows, "cnn threads 2"));
    print_efficiency_line("fjit threads, schedule", one, row(rows, "cnn threads 2 schedule"));
    print_efficiency_line("fjit threads, worker", one, row(rows, "cnn threads 2 worker"));
    print_efficiency_line("threads, sync only (*)", one, row(rows, "cnn threads sync"));
  } else {
    print_efficiency_line("fjit MPI", one, row(rows, "cnn MPI 2"));
    print_efficiency_line("fjit MPI, schedule", one, row(rows, "cnn MPI 2 schedule"));
    print_efficiency_line("fjit MPI, worker", one, row(rows, "cnn MPI 2 worker"));
    print_efficiency_line("MPI, sync only (*)", one, row(rows, "cnn MPI sync"));
  }
  std::printf(
      "  (*) the CNN's ceiling: fjit's one-replica step, gradients left local, on each "
      "replica, and one barrier a step with no data (there is no hand-written CNN step)\n");
}

void CnnScaling::print_ceilings(double target) const {
  const std::vector<Row>& rows = impl_->rows;
  if (impl_->ranks.rank != 0) return;
  const Row& one = row(rows, "cnn 1");
  const bool mpi = impl_->ranks.mpi;
  const std::string two = mpi ? "cnn MPI 2" : "cnn threads 2";
  const Row& sync = row(rows, mpi ? "cnn MPI sync" : "cnn threads sync");
  print_ceiling_line(mpi ? "CNN MPI" : "CNN threads", one, row(rows, two), one, sync, target);
  for (const char* mode : {"schedule", "worker"})
    print_ceiling_line((std::string(mpi ? "CNN MPI" : "CNN threads") + ", overlap " + mode).c_str(), one,
                       row(rows, two + " " + mode), one, sync, target);
}

void CnnScaling::print_breakdown() const {
  const std::vector<Row>& rows = impl_->rows;
  bench::print_breakdown(row(rows, impl_->ranks.mpi ? "cnn MPI 2" : "cnn threads 2"), impl_->ranks);
}

}  // namespace fjit::bench
