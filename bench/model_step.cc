// One training step of each model the project ships, timed alone: the fjit half of the
// side-by-side comparison with JAX that bench/jax_step.py runs (it starts this program once
// per round, between rounds of its own, and divides).
//
//   build/bench/model_step --model cnn --steps 30       # prints "STEP_US <median> <min> <max>"
//   build/bench/model_step --model cnn --serve          # reads step counts from stdin, one a
//                                                       # line, and prints a STEP_US line each
//   build/bench/model_step --model cnn --check F.bin    # writes the initial parameters and the
//                                                       # batch to F.bin (bench/array_file.h),
//                                                       # prints "LOSSES <l1> <l2> <l3>"
//
// Models (examples/lib/models.h, batch and optimizer as bench/jax_step.py's):
//   mlp-sgd   MLP 784-512-512-10, batch 128, SGD lr 0.01
//   mlp-adam  the same with Adam (lr 1e-3)
//   mlp-small MLP 64-128-10, batch 64, SGD lr 0.01
//   cnn       the CNN of train_cnn, batch 128, AdamW, dropout 0.3
//   vit       the ViT of train_vit, batch 128, AdamW, dropout 0.1
// The step is jit(value_and_grad(loss) + the update), parameters and state in and out (run
// with run_into: no output allocation), the dropout key an argument. One intra-op thread
// unless FJIT_INTRA_OP_THREADS says otherwise. Printed: the stepping thread's CPU time per
// step (median, min, max over --steps after --warmup steps) and the median wall time, which
// is the figure to compare with more than one intra-op thread (the CPU time of the calling
// thread leaves the other threads out). --serve keeps one process for many timings (the
// comparison scripts' long-lived workers): each line on stdin is a number of steps to time
// after --warmup more, answered by one STEP_US line; an empty line or end of input ends it.
// --compute-dtype bf16 traces the step under the layers' bf16 policy (core/nn/precision.h).
// --check turns dropout off and prints the losses of the first three steps, for
// bench/libtorch_step --check to reproduce from the same file.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench/array_file.h"
#include "bench/serve_steps.h"
#include "examples/lib/mlp_model.h"
#include "parallel/fjit.h"

using namespace fjit;
using namespace fjit::examples;

namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

struct Bench {
  ModelSpec spec;
  int64_t batch = 128;
  int64_t features = 784;
  int64_t classes = 10;
  std::string optimizer;  // sgd, adam, adamw
};

bool configure(const std::string& name, Bench* b) {
  if (name == "mlp-sgd" || name == "mlp-adam") {
    b->spec.layers = {784, 512, 512, 10};
    b->optimizer = name == "mlp-sgd" ? "sgd" : "adam";
  } else if (name == "mlp-small") {
    b->spec.layers = {64, 128, 10};
    b->batch = 64;
    b->features = 64;
    b->optimizer = "sgd";
  } else if (name == "cnn" || name == "vit") {
    b->spec.kind = name == "cnn" ? ModelKind::cnn : ModelKind::vit;
    b->spec.dropout = name == "cnn" ? 0.3 : 0.1;
    b->optimizer = "adamw";
  } else {
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "cnn";
  std::string check_file;
  int steps = 30, warmup = 5;
  bool serve = false;
  DType compute = DType::f32;  // --compute-dtype: the layers' policy (core/nn/precision.h)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--serve")) serve = true;
    else if (i + 1 >= argc) steps = 0;  // a flag without its value: the usage below
    else if (!std::strcmp(argv[i], "--model")) model = argv[++i];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--check")) check_file = argv[++i];
    else if (!std::strcmp(argv[i], "--compute-dtype")) {
      if (!compute_dtype_from_name(argv[++i], &compute)) steps = 0;
    } else steps = 0;
  }
  Bench b;
  if (!configure(model, &b) || steps < 1) {
    std::fprintf(stderr, "usage: %s --model mlp-sgd|mlp-adam|mlp-small|cnn|vit [--steps N] "
                         "[--warmup N] [--serve] [--check FILE] [--compute-dtype f32|bf16]\n", argv[0]);
    return 2;
  }
  if (!check_file.empty()) b.spec.dropout = 0.0;
  // The step runs in a plain jit() on this thread, which FJIT_INTRA_OP_THREADS does not reach
  // by itself (it sets pmap's replicas): apply it here, else one thread.
  set_intra_op_threads(config::is_set(config::Id::intra_op_threads)
                           ? static_cast<int>(config::intra_op_threads()) : 1);
  const ModelSpec spec = b.spec;
  const std::string opt_name = b.optimizer;
  auto step = jit([spec, opt_name, compute](const Params& p, const Params& s, const Tensor& x,
                                            const Tensor& y, const Tensor& key) {
    PrecisionScope precision({.compute = compute});
    auto loss_fn = [&](const Params& q) {
      return mean(softmax_cross_entropy(model_logits(spec, q, x, true, key), y));
    };
    auto [loss, g] = value_and_grad(loss_fn)(p);
    if (opt_name == "sgd") return std::tuple{sgd(p, g, 0.01), s, loss};
    auto [p2, s2] = opt_name == "adam" ? Adam{}.update(p, g, s) : AdamW{}.update(p, g, s);
    return std::tuple{p2, s2, loss};
  }, JitOptions{.name = "train_step"});

  ArrayDict params = init_model(spec, 1);
  ArrayDict state = opt_name == "sgd" ? ArrayDict{} : opt_name == "adam" ? Adam{}.init_state(params)
                                                                          : AdamW{}.init_state(params);
  const bool pixels = spec.kind != ModelKind::mlp;
  Array x = pixels ? Array(DType::u8, {b.batch, b.features}) : he_uniform({b.batch, b.features}, 3);
  if (pixels)
    for (int64_t i = 0; i < x.size(); ++i) x.data<u8_t>()[i] = u8_t{static_cast<uint8_t>(i * 37)};
  Array y(DType::i32, {b.batch});
  for (int64_t i = 0; i < b.batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % b.classes);
  const Array key = prng_key_array(7);

  std::tuple<ArrayDict, ArrayDict, Array> out[2];
  out[0] = step(params, state, x, y, key);
  if (!check_file.empty()) {
    std::vector<std::pair<std::string, Array>> arrays(params.begin(), params.end());
    arrays.emplace_back("input/x", x);
    arrays.emplace_back("input/y", y);
    bench::write_array_file(check_file, arrays);
    std::printf("LOSSES %.6f", std::get<2>(out[0]).item<double>());
    for (int i = 0; i < 2; ++i) {
      step.run_into(out[(i + 1) % 2], std::get<0>(out[i % 2]), std::get<1>(out[i % 2]), x, y, key);
      std::printf(" %.6f", std::get<2>(out[(i + 1) % 2]).item<double>());
    }
    std::printf("  (%s, dropout off)\n", model.c_str());
    return 0;
  }
  int done = 0;  // steps run since out[0]; out[done % 2] holds the latest parameters
  auto time_steps = [&](int n) {
    std::vector<double> us, wall;
    for (int i = 0; i < warmup + n; ++i, ++done) {
      auto& in = out[done % 2];
      const double t0 = thread_cpu_us();
      const int64_t w0 = now_ns();
      step.run_into(out[(done + 1) % 2], std::get<0>(in), std::get<1>(in), x, y, key);
      const double t = thread_cpu_us() - t0;
      if (i >= warmup) us.push_back(t), wall.push_back((now_ns() - w0) * 1e-3);
    }
    std::sort(us.begin(), us.end());
    std::sort(wall.begin(), wall.end());
    std::printf("STEP_US %.1f %.1f %.1f WALL_US %.1f  (%s %s, %zu steps, loss %.4f)\n", us[us.size() / 2],
                us.front(), us.back(), wall[wall.size() / 2], model.c_str(), dtype_name(compute), us.size(),
                std::get<2>(out[done % 2]).item<double>());
    std::fflush(stdout);
  };
  return run_or_serve(serve, steps, time_steps);
}
