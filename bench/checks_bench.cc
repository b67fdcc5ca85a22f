// What checks cost per training step: SGD steps of a relu MLP (784-512-512-10 at batch 128,
// 64-128-10 at batch 64, f32) with the checks a production job would write, compiled
//   off   CheckMode::off: check() records nothing (the baseline)
//   prod  CheckMode::user: the checks below, no automatic ones
//   all   CheckMode::all: the same plus automatic NaN/Inf, division, index and domain checks
//   fpe   CheckMode::fpe: prod plus the CPU's exception flags around every instruction
// Production checks: loss finite and below a bound, global gradient norm finite (so no
// gradient holds a NaN or Inf: the norm is non-finite iff one does, or the squares overflow)
// and below a bound. Three step shapes:
//   loss       the step returns (params, loss): the gradient norm exists only for the checks,
//              so its computation (a square and a sum over every gradient) is part of what
//              they cost
//   loss+norm  the step also returns the norm (most training loops log it): the checks then
//              only add their predicates and the host's flag handling
//   loss,sum   like loss, but gradients are checked through the sum of all their elements
//              (non-finite iff one is, barring overflow): one read of each gradient, no norm
//              bound
//
//   build/bench/checks_bench
//   FJIT_BENCH_INTERLEAVED=1 build/bench/checks_bench --benchmark_filter=none
//     alternates the modes (and prod under a step deadline that is never reached) step by step and prints median CPU times and overheads
//     (the median over rounds of each round's ratio to its own off block: fairer on a loaded
//     machine than back-to-back runs or a ratio of two medians), what the norm's squares add to the
//     largest layer's GEMM update (the two alternated too), then the host-side cost per step
//     of handle_step_checks when nothing raised (1 replica, 2 thread replicas) next to the
//     bare collectives it could cost: a one-int32 all-reduce and a 24-byte all-gather.
//   mpiexec -n 2 build/bench/checks_bench
//     under MPI, only that host-side cost, with MPI ranks, next to a plain one-int
//     MPI_Allreduce (the yardstick: about 0.5 us here).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>

#include "checks/step_check_handler.h"
#include "parallel/fjit.h"
#include "core/lib/initializers.h"
#include "parallel/mesh.h"
#include "parallel/shm_communicator.h"
#include "examples/lib/mlp_model.h"

using namespace fjit;

namespace {

constexpr double kLr = 0.01;

struct Config {
  const char* title;
  std::vector<int64_t> sizes;
  int64_t batch;
};
const Config kLarge{"MLP 784-512-512-10, batch 128", {784, 512, 512, 10}, 128};
const Config kSmall{"MLP 64-128-10, batch 64", {64, 128, 10}, 64};

Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  return mean(softmax_cross_entropy(examples::mlp_logits(p, x), y));
}

enum StepShape { kLoss, kLossNorm, kLossSum };
const char* shape_name(StepShape s) { return s == kLoss ? "loss" : s == kLossNorm ? "loss+norm" : "loss,sum"; }

template <StepShape kShape>
auto make_step(CheckMode mode, double timeout_s = 0) {
  JitOptions o;
  o.name = "train_step";
  o.checks = mode;
  o.step_timeout_s = timeout_s;
  o.policy = CheckPolicy::throw_error;
  return jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    check(isfinite(loss), "loss is {}", loss);
    check(loss < 1e4, "loss {} exploded", loss);
    if constexpr (kShape == kLossSum) {
      Tensor total = scalar(DType::f32, 0);
      for (const auto& kv : g) total = total + sum(kv.second);
      check(isfinite(total), "a gradient holds NaN or Inf (their sum is {})", total);
      return std::tuple{sgd(p, g, kLr), loss};
    } else {
      Tensor gnorm = global_norm(g);
      check(isfinite(gnorm), "gradient norm is {}: a gradient holds NaN or Inf", gnorm);
      check(gnorm < 1e4, "gradient norm {} exploded", gnorm);
      if constexpr (kShape == kLossNorm) return std::tuple{sgd(p, g, kLr), loss, gnorm};
      else return std::tuple{sgd(p, g, kLr), loss};
    }
  }, o);
}

// One compiled step with its double-buffered state; step() runs it once (no allocation).
struct Runner {
  std::function<void()> step;
  int sites = 0;
  size_t instrs = 0;
};

template <StepShape kShape>
Runner make_runner(const Config& c, CheckMode mode, double timeout_s) {
  struct State {
    decltype(make_step<kShape>(CheckMode::off)) fn;
    ArrayDict p;
    Array x, y;
    std::conditional_t<kShape == kLossNorm, std::tuple<ArrayDict, Array, Array>, std::tuple<ArrayDict, Array>> out;
  };
  auto s = std::make_shared<State>(State{make_step<kShape>(mode, timeout_s), mlp_params(c.sizes, 1),
                                         he_uniform(Shape{c.batch, c.sizes.front()}, 3), Array(DType::i32, Shape{c.batch}), {}});
  for (int64_t i = 0; i < c.batch; ++i) s->y.template data<int32_t>()[i] = static_cast<int32_t>((i * 7) % c.sizes.back());
  s->fn.run_into(s->out, s->p, s->x, s->y);
  Runner r;
  r.step = [s] {
    s->fn.run_into(s->out, s->p, s->x, s->y);
    std::swap(s->p, std::get<0>(s->out));
    benchmark::DoNotOptimize(std::get<1>(s->out).raw());
  };
  r.step();
  const auto& exe = *s->fn.core().last_entry()->exe;
  r.sites = exe.num_check_sites();
  r.instrs = exe.instrs.size();
  return r;
}

Runner make_runner(const Config& c, CheckMode mode, StepShape shape, double timeout_s = 0) {
  switch (shape) {
    case kLoss: return make_runner<kLoss>(c, mode, timeout_s);
    case kLossNorm: return make_runner<kLossNorm>(c, mode, timeout_s);
    case kLossSum: break;
  }
  return make_runner<kLossSum>(c, mode, timeout_s);
}

void BM_Step(benchmark::State& state, const Config& c, CheckMode mode, StepShape shape) {
  Runner r = make_runner(c, mode, shape);
  for (auto _ : state) r.step();
  state.counters["checks"] = r.sites;
  state.counters["instrs"] = static_cast<double>(r.instrs);
}

#define CHECKS_BENCH(config, tag, shape)                                                          \
  BENCHMARK_CAPTURE(BM_Step, config##_##tag##_off, config, CheckMode::off, shape)->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(BM_Step, config##_##tag##_prod, config, CheckMode::user, shape)->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(BM_Step, config##_##tag##_all, config, CheckMode::all, shape)->Unit(benchmark::kMicrosecond)
CHECKS_BENCH(kLarge, loss, kLoss);
CHECKS_BENCH(kLarge, loss_norm, kLossNorm);
CHECKS_BENCH(kLarge, loss_sum, kLossSum);
CHECKS_BENCH(kSmall, loss, kLoss);
CHECKS_BENCH(kSmall, loss_norm, kLossNorm);
CHECKS_BENCH(kSmall, loss_sum, kLossSum);

double cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Each round runs `batch` steps of every mode in turn, so all modes see the same background
// load; the result is the median per-step time over rounds.
void interleaved(const Config& c, StepShape shape, int rounds, int batch) {
  const CheckMode modes[] = {CheckMode::off, CheckMode::user, CheckMode::all, CheckMode::fpe};
  std::vector<Runner> runners;
  for (CheckMode m : modes) runners.push_back(make_runner(c, m, shape));
  // prod under a step deadline never reached: what polling it costs (executable.h).
  runners.push_back(make_runner(c, CheckMode::user, shape, 600.0));
  std::vector<std::vector<double>> times(runners.size());
  // The order of the modes turns every round, so none always follows the same other one
  // (whose working set it would find in the caches, or not).
  for (int round = 0; round < rounds; ++round)
    for (size_t k = 0; k < runners.size(); ++k) {
      const size_t m = (k + static_cast<size_t>(round)) % runners.size();
      const double t0 = cpu_ns();
      for (int i = 0; i < batch; ++i) runners[m].step();
      times[m].push_back((cpu_ns() - t0) / batch);
    }
  const double off = median(times[0]) / 1e3, prod = median(times[1]) / 1e3, all = median(times[2]) / 1e3;
  // The overheads are medians of each round's own ratio to the off block next to it: the
  // blocks of one round share the machine's load of that moment, so its drift cancels.
  auto overhead = [&](size_t m, size_t base = 0) {
    std::vector<double> r;
    for (size_t i = 0; i < times[0].size(); ++i) r.push_back(times[m][i] / times[base][i]);
    return 100 * (median(r) - 1);
  };
  const double fpe = median(times[3]) / 1e3;
  std::printf("%-31s %-9s off %8.1f us | prod %8.1f us %+6.2f%% (%d checks) | all %8.1f us %+6.2f%% (%d checks)"
              " | fpe %8.1f us %+6.2f%% | prod+deadline %8.1f us %+6.2f%% of prod\n",
              c.title, shape_name(shape), off, prod, overhead(1), runners[1].sites, all, overhead(2),
              runners[2].sites, fpe, overhead(3), median(times[4]) / 1e3, overhead(4, 1));
}

// What a gradient norm adds inside the GEMM update of the largest layer (the weight gradient
// 784x512 at batch 128, as in the large step): w - lr * a^T g alone, and with the sum of
// (a^T g)'s squares that a global norm reads, each one instruction.
template <bool kSquares>
auto make_update() {
  JitOptions o;
  o.name = kSquares ? "update_and_squares" : "update";
  o.checks = CheckMode::off;
  return jit([](const Tensor& w, const Tensor& a, const Tensor& g) {
    Tensor dw = matmul(transpose(a), g);
    if constexpr (kSquares) return std::tuple{w - dw * kLr, sum(dw * dw)};
    else return std::tuple{w - dw * kLr};
  }, o);
}

template <bool kSquares>
std::function<void()> update_runner() {
  struct State {
    decltype(make_update<kSquares>()) fn;
    Array w, a, g;
    std::conditional_t<kSquares, std::tuple<Array, Array>, std::tuple<Array>> out;
  };
  auto s = std::make_shared<State>(State{make_update<kSquares>(), he_uniform(Shape{784, 512}, 1),
                                         he_uniform(Shape{128, 784}, 2), he_uniform(Shape{128, 512}, 3), {}});
  s->fn.run_into(s->out, s->w, s->a, s->g);
  return [s] {
    s->fn.run_into(s->out, s->w, s->a, s->g);
    benchmark::DoNotOptimize(std::get<0>(s->out).raw());
  };
}

void gemm_norm_cost(int rounds, int batch) {
  std::function<void()> run[2] = {update_runner<false>(), update_runner<true>()};
  std::vector<double> times[2];
  for (int round = 0; round < rounds; ++round)
    for (int k = 0; k < 2; ++k) {
      const int v = (k + round) % 2;  // either order, in turn
      const double t0 = cpu_ns();
      for (int i = 0; i < batch; ++i) run[v]();
      times[v].push_back((cpu_ns() - t0) / batch);
    }
  const double plain = median(times[0]) / 1e3, squares = median(times[1]) / 1e3;
  // The fastest round as well: the difference is a few microseconds out of two milliseconds,
  // and on a shared machine the medians of two alternated loops can differ by more than that.
  const double plain_min = *std::min_element(times[0].begin(), times[0].end()) / 1e3;
  const double squares_min = *std::min_element(times[1].begin(), times[1].end()) / 1e3;
  std::printf("GEMM update 784x128x512       w - lr a^T g %8.1f us | and its sum of squares %8.1f us %+6.1f us"
              " (fastest rounds %.1f, %.1f: %+.1f us)\n",
              plain, squares, squares - plain, plain_min, squares_min, squares_min - plain_min);
}

// Host-side cost of the checks per step when nothing raised: handle_step_checks on a plan
// with two check sites, timed per call (wall clock: a collective's cost is mostly waiting).
double wall_ns() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count());
}

const Executable& checked_plan() {
  static auto f = [] {
    JitOptions o;
    o.name = "host_cost";
    o.checks = CheckMode::user;
    return jit([](const Tensor& x) {
      Tensor s = sum(x);
      check(isfinite(s), "sum is {}", s);
      check(s < 1e6, "sum {} too large", s);
      return s;
    }, o);
  }();
  static const Array x = Array::full(DType::f32, {4}, 1.0);
  f(x);
  return *f.core().last_entry()->exe;
}

struct HostCost {
  double checks = 0, all_reduce = 0, all_gather = 0, mpi = 0;  // ns per call, medians
};

// Every replica of `comm` (null: one replica) runs the same loop; rounds interleave the
// measured calls so they see the same load.
HostCost host_cost(Communicator* comm, bool with_mpi, int rounds, int batch) {
  const Executable& exe = checked_plan();
  std::vector<uint32_t> flags(exe.num_check_sites(), 0);
  std::vector<double> payload(flags.size() * kCheckPayloadSlots, 0.0);
  StepChecks sc;
  sc.exe = &exe;
  sc.flags = flags.data();
  sc.payload = payload.data();
  sc.comm = comm;
  sc.replica = comm ? comm->rank() : 0;
  sc.function = "host_cost";
  std::vector<double> t[4];
  int64_t summary[3] = {0, 0, 2}, gathered[3 * 8];
  for (int round = 0; round < rounds; ++round) {
    for (int what = 0; what < (comm ? (with_mpi ? 4 : 3) : 1); ++what) {
      if (comm) comm->barrier();
      const double t0 = wall_ns();
      for (int i = 0; i < batch; ++i) {
        sc.step = round * batch + i;
        if (what == 0) {
          benchmark::DoNotOptimize(handle_step_checks(sc));
        } else if (what == 1) {
          int32_t any = 0;
          comm->all_reduce(&any, 1, DType::i32, ReduceOp::max);
        } else if (what == 2) {
          comm->all_gather(summary, gathered, sizeof summary);  // the summary gather used before
        } else {
          int any = 0;
          MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        }
      }
      t[what].push_back((wall_ns() - t0) / batch);
    }
  }
  HostCost c;
  c.checks = median(t[0]);
  if (comm) {
    c.all_reduce = median(t[1]);
    c.all_gather = median(t[2]);
    if (with_mpi) c.mpi = median(t[3]);
  }
  return c;
}

void print_host_cost(const char* label, const HostCost& c) {
  std::printf("%-22s handle_step_checks %7.3f us", label, c.checks / 1e3);
  if (c.all_reduce > 0)
    std::printf(" | one-int32 all_reduce %7.3f us | 24-byte all_gather %7.3f us", c.all_reduce / 1e3,
                c.all_gather / 1e3);
  if (c.mpi > 0) std::printf(" | plain MPI_Allreduce(1 int) %7.3f us", c.mpi / 1e3);
  std::printf("\n");
}

void host_costs_threads() {
  std::printf("host-side checks cost per step, nothing raised (median wall time per call)\n");
  print_host_cost("1 replica", host_cost(nullptr, false, 51, 2000));
  ShmGroup group(2);
  HostCost c0;
  group.run([&](Communicator& comm) {
    HostCost c = host_cost(&comm, false, 51, 500);
    if (comm.rank() == 0) c0 = c;
  });
  print_host_cost("2 thread replicas", c0);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {  // launched by mpiexec: only the host-side cost
    Mesh mesh = Mesh::mpi(&argc, &argv);
    const HostCost c = host_cost(&mesh.comm(0), true, 51, 500);
    if (mesh.first_replica() == 0) {
      std::printf("host-side checks cost per step, nothing raised (median wall time per call)\n");
      print_host_cost((std::to_string(mesh.size()) + " MPI ranks").c_str(), c);
    }
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (const char* env = std::getenv("FJIT_BENCH_INTERLEAVED"); env && *env && *env != '0') {
    std::printf("median CPU time per step, modes interleaved\n");
    for (StepShape shape : {kLoss, kLossNorm, kLossSum}) {
      interleaved(kLarge, shape, 101, 3);
      interleaved(kSmall, shape, 301, 100);
    }
    gemm_norm_cost(201, 10);
    host_costs_threads();
  }
  return 0;
}
