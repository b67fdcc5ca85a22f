// One full training step, fjit against a hand-written Eigen baseline (bench/mlp_reference.h):
//   fjit:  jit(value_and_grad(mlp_loss) + sgd), run with run_into (no output allocation)
//   hand:  the same math with preallocated buffers and noalias GEMMs
// for a relu MLP 784-512-512-10 at batch 128 and 64-128-10 at batch 64, f32.
//
//   build/bench/train_step_bench
//   FJIT_PROFILE_PLAN=1 build/bench/train_step_bench --benchmark_filter=none
//     prints the time of every instruction of each fjit plan, grouped by op, and the total.
//   FJIT_BENCH_INTERLEAVED=1 build/bench/train_step_bench --benchmark_filter=none
//     alternates fjit and hand-written steps and prints median times and ratios (fairer on a
//     loaded machine).
// Before timing, each pair is checked to compute the same loss and updated parameters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>

#include <fmt/format.h>

#include "bench/mlp_reference.h"
#include "parallel/fjit.h"
#include "core/lib/initializers.h"
#include "core/base/timeline.h"
#include "examples/lib/mlp_model.h"

using namespace fjit;

namespace {

constexpr double kLr = 0.01;

struct Config {
  std::vector<int64_t> sizes;
  int64_t batch;
};
const Config kLarge{{784, 512, 512, 10}, 128};
const Config kSmall{{64, 128, 10}, 64};

Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  return mean(softmax_cross_entropy(examples::mlp_logits(p, x), y));
}

auto make_step(std::vector<int> donate = {}) {
  return jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    return std::tuple{sgd(p, g, kLr), loss};
  }, JitOptions{.name = "train_step", .donate_argnums = donate});
}

struct Data {
  Array x, y;
};
Data make_data(const Config& c) {
  Data d{he_uniform({c.batch, c.sizes.front()}, 3), Array(DType::i32, {c.batch})};
  for (int64_t i = 0; i < c.batch; ++i) d.y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % c.sizes.back());
  return d;
}

bench::HandWrittenMlp make_hand(const Config& c, const ArrayDict& p) {
  bench::HandWrittenMlp h(c.sizes, c.batch);
  for (size_t k = 0; k < h.w.size(); ++k) {
    const Array& w = p[fmt::format("w{}", k + 1)];
    const Array& b = p[fmt::format("b{}", k + 1)];
    std::copy_n(w.data<float>(), w.size(), h.w[k].data());
    std::copy_n(b.data<float>(), b.size(), h.b[k].data());
  }
  return h;
}

// The two implementations agree on one step (loss and every updated parameter).
void check_same(const Config& c) {
  ArrayDict p = mlp_params(c.sizes, 1);
  Data d = make_data(c);
  bench::HandWrittenMlp hand = make_hand(c, p);
  const float hand_loss = hand.step(d.x.data<float>(), d.y.data<int32_t>(), kLr);
  auto step = make_step();
  auto [p2, loss] = step(p, d.x, d.y);
  double worst = std::abs(loss.item<float>() - hand_loss);
  for (size_t k = 0; k < hand.w.size(); ++k) {
    const Array& w = p2[fmt::format("w{}", k + 1)];
    for (int64_t i = 0; i < w.size(); ++i) worst = std::max<double>(worst, std::abs(w.data<float>()[i] - hand.w[k].data()[i]));
    const Array& b = p2[fmt::format("b{}", k + 1)];
    for (int64_t i = 0; i < b.size(); ++i) worst = std::max<double>(worst, std::abs(b.data<float>()[i] - hand.b[k].data()[i]));
  }
  if (worst > 1e-4) {
    std::fprintf(stderr, "train_step_bench: fjit and hand-written steps differ by %g\n", worst);
    std::exit(1);
  }
}

void BM_Fjit(benchmark::State& state, const Config& c) {
  ArrayDict p = mlp_params(c.sizes, 1);
  Data d = make_data(c);
  auto step = make_step();
  std::tuple<ArrayDict, Array> out;
  step.run_into(out, p, d.x, d.y);
  for (auto _ : state) {
    step.run_into(out, p, d.x, d.y);
    std::swap(p, std::get<0>(out));  // double-buffered parameters: no allocation
    benchmark::DoNotOptimize(std::get<1>(out).raw());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(step.core().last_entry()->exe->flops) * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
}

void BM_Hand(benchmark::State& state, const Config& c) {
  Data d = make_data(c);
  bench::HandWrittenMlp hand = make_hand(c, mlp_params(c.sizes, 1));
  for (auto _ : state) benchmark::DoNotOptimize(hand.step(d.x.data<float>(), d.y.data<int32_t>(), kLr));
}

BENCHMARK_CAPTURE(BM_Fjit, mlp_784_512_512_10_b128, kLarge)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Hand, mlp_784_512_512_10_b128, kLarge)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Fjit, mlp_64_128_10_b64, kSmall)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Hand, mlp_64_128_10_b64, kSmall)->Unit(benchmark::kMicrosecond);

// Times every instruction of the compiled step by running the plan's kernels one by one over
// a buffer table built the way Executable::run builds it.
void profile_plan(const Config& c, const char* title) {
  ArrayDict p = mlp_params(c.sizes, 1);
  Data d = make_data(c);
  auto step = make_step();
  std::tuple<ArrayDict, Array> out;
  step.run_into(out, p, d.x, d.y);
  const Executable& exe = *step.core().last_entry()->exe;
  std::vector<const Array*> ins;
  for (const auto& kv : p) ins.push_back(&kv.second);
  ins.push_back(&d.x);
  ins.push_back(&d.y);
  std::vector<Array*> outs;
  for (auto& kv : std::get<0>(out)) outs.push_back(&kv.second);
  outs.push_back(&std::get<1>(out));
  std::vector<std::byte> arena(exe.arena_bytes + 64);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(arena.data()) + 63) & ~uintptr_t{63});
  std::vector<void*> table(exe.buffers.size());
  for (size_t b = 0; b < table.size(); ++b) {
    const BufferRef& r = exe.buffers[b];
    switch (r.kind) {
      case BufferRef::kInput: table[b] = const_cast<void*>(ins[r.where]->raw()); break;
      case BufferRef::kOutput: table[b] = outs[r.where]->raw(); break;
      case BufferRef::kConstant: table[b] = const_cast<void*>(r.constant); break;
      case BufferRef::kArena: table[b] = base + r.where; break;
    }
  }
  RunContext ctx;
  const Frame frame{table.data(), &ctx};
  // Medians, not means: a preempted sample on a shared machine would dominate a mean.
  const int reps = 301;
  std::vector<std::vector<double>> ns(exe.instrs.size());
  for (int rep = 0; rep < reps + 10; ++rep)
    for (size_t i = 0; i < exe.instrs.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      exe.instrs[i].fn(exe.instrs[i], frame);
      const auto t1 = std::chrono::steady_clock::now();
      if (rep >= 10) ns[i].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    }
  double total = 0;
  std::map<std::string, std::pair<double, int>> by_op;
  std::printf("\n== %s: %zu instructions, arena %zu bytes; median us over %d runs\n", title,
              exe.instrs.size(), exe.arena_bytes, reps);
  for (size_t i = 0; i < exe.instrs.size(); ++i) {
    const Instr& in = exe.instrs[i];
    std::nth_element(ns[i].begin(), ns[i].begin() + reps / 2, ns[i].end());
    const double us = ns[i][reps / 2] / 1e3;
    total += us;
    // Fused instructions are grouped by kind: "fused", "fused_sum" or "gemm" (an epilogue).
    const std::string kind = in.label.empty() ? op_name(in.op) : in.label.substr(0, in.label.find('['));
    auto& [t, n] = by_op[kind];
    t += us;
    ++n;
    std::string args;
    for (const ValueType& t : in.ins) args += (args.empty() ? "" : ", ") + type_str(t.dtype, t.shape);
    std::printf("  %3zu %9.2f us  %-12s %-16s <- %s%s%s\n", i, us, kind.c_str(),
                type_str(in.out.dtype, in.out.shape).c_str(), args.c_str(), in.attrs.trans_a ? " trans_a" : "",
                in.attrs.trans_b ? " trans_b" : "");
  }
  std::printf("  by op:\n");
  for (const auto& [op, tn] : by_op) std::printf("    %-12s %3d instr %9.2f us\n", op.c_str(), tn.second, tn.first);
  std::printf("  total %.2f us\n", total);
}

// Alternates one fjit step and one hand-written step, timing each by thread CPU time, and
// prints the medians and their ratio: on a shared machine, interleaving exposes both sides to
// the same background load, which back-to-back benchmark runs do not.
// What recording a timeline costs (core/base/timeline.h): rounds of a block of steps with
// the timeline off, then a block with it on (started before, written and stopped after, both
// untimed); the per-round ratio on/off, median and range.
void timeline_cost(const Config& c, const char* title, int rounds, int block) {
  ArrayDict p = mlp_params(c.sizes, 1);
  Data d = make_data(c);
  auto step = make_step();
  std::tuple<ArrayDict, Array> out;
  step.run_into(out, p, d.x, d.y);
  auto cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
  };
  auto run_block = [&] {
    const double t0 = cpu_ns();
    for (int i = 0; i < block; ++i) {
      step.run_into(out, p, d.x, d.y);
      std::swap(p, std::get<0>(out));
    }
    return (cpu_ns() - t0) / block;
  };
  const std::string path = "/tmp/fjit_timeline_bench.json";
  std::vector<double> ratios, off_us;
  for (int r = 0; r < rounds; ++r) {
    const double off = run_block();
    timeline::start(path);
    const double on = run_block();
    timeline::stop();
    ratios.push_back(on / off);
    off_us.push_back(off / 1e3);
  }
  std::remove(path.c_str());
  std::sort(ratios.begin(), ratios.end());
  std::sort(off_us.begin(), off_us.end());
  std::printf("%-44s timeline on/off ratio %.3f (range %.3f-%.3f; off %.1f us; median of %d rounds of %d steps)\n",
              title, ratios[ratios.size() / 2], ratios.front(), ratios.back(),
              off_us[off_us.size() / 2], rounds, block);
}

void interleaved(const Config& c, const char* title, int steps) {
  ArrayDict p = mlp_params(c.sizes, 1);
  Data d = make_data(c);
  auto step = make_step();
  std::tuple<ArrayDict, Array> out;
  step.run_into(out, p, d.x, d.y);
  bench::HandWrittenMlp hand = make_hand(c, p);
  auto cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
  };
  // A third side: the parameters donated (JitOptions::donate_argnums), updated in place.
  ArrayDict pd = mlp_params(c.sizes, 1);
  auto donating = make_step({0});
  std::tuple<ArrayDict, Array> outd{pd, Array()};
  std::vector<double> tf, th, td;
  for (int i = 0; i < steps; ++i) {
    double t0 = cpu_ns();
    step.run_into(out, p, d.x, d.y);
    std::swap(p, std::get<0>(out));
    double t1 = cpu_ns();
    benchmark::DoNotOptimize(hand.step(d.x.data<float>(), d.y.data<int32_t>(), kLr));
    double t2 = cpu_ns();
    donating.run_into(outd, pd, d.x, d.y);
    double t3 = cpu_ns();
    tf.push_back(t1 - t0);
    th.push_back(t2 - t1);
    td.push_back(t3 - t2);
  }
  if (std::get<0>(outd)["w1"].raw() != pd["w1"].raw()) {
    std::fprintf(stderr, "train_step_bench: donated parameters were not updated in place\n");
    std::exit(1);
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double mf = median(tf) / 1e3, mh = median(th) / 1e3;
  std::printf("%-44s fjit %9.1f us  hand %9.1f us  ratio %.3f  (median CPU time of %d interleaved steps)\n",
              title, mf, mh, mf / mh, steps);
  const double md = median(td) / 1e3;
  std::printf("%-44s fjit donated %9.1f us  hand %9.1f us  ratio %.3f  (same run)\n", title, md, mh,
              md / mh);
}

}  // namespace

int main(int argc, char** argv) {
  check_same(kLarge);
  check_same(kSmall);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (const char* env = std::getenv("FJIT_BENCH_INTERLEAVED"); env && *env && *env != '0') {
    interleaved(kLarge, "MLP 784-512-512-10, batch 128", 300);
    interleaved(kSmall, "MLP 64-128-10, batch 64", 20000);
  }
  if (const char* env = std::getenv("FJIT_BENCH_TIMELINE"); env && *env && *env != '0') {
    timeline_cost(kLarge, "MLP 784-512-512-10, batch 128", 15, 20);
    timeline_cost(kSmall, "MLP 64-128-10, batch 64", 15, 1000);
  }
  if (const char* env = std::getenv("FJIT_PROFILE_PLAN"); env && *env && *env != '0') {
    profile_plan(kLarge, "fjit step, MLP 784-512-512-10, batch 128");
    profile_plan(kSmall, "fjit step, MLP 64-128-10, batch 64");
  }
  return 0;
}
