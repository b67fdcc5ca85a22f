// The per-example-gradient step of DP-SGD alone, fjit's side of bench/dpsgd_compare.py:
// jit(vmap(grad(loss of one example))) over a batch, each example's whole gradient's L2 norm,
// clipping to C = 1, and the sum of the clipped gradients (examples/lib/dp_sgd.h: the f32
// sum, clipped_sum, as JAX's and PyTorch's sides compute it).
//
//   build/bench/dpsgd_step --layers 784,512,512,10 --batch 128 --steps 30
//       prints "STEP_US <median> <min> <max> WALL_US <median>" (thread CPU time per step)
//   build/bench/dpsgd_step ... --serve    reads step counts from stdin, one a line, and
//       answers each with a STEP_US line (bench/step_rounds.py's Worker)
//   build/bench/dpsgd_step ... --check    prints the sum of the first clipped-sum leaf's
//       elements, for the sides to compare on the same inputs
// Inputs: he_uniform images and labels i % 10, parameters init_mlp(layers, 1).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench/serve_steps.h"
#include "lib/dp_sgd.h"
#include "lib/mlp_model.h"

using namespace fjit;

namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> layers = {784, 512, 512, 10};
  int64_t batch = 128;
  int steps = 30, warmup = 2;
  bool serve = false, check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--serve") serve = true;
    else if (a == "--check") check_only = true;
    else if (a == "--batch" && i + 1 < argc) batch = std::atoll(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) {
      layers.clear();
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) layers.push_back(std::atoll(t));
    } else {
      std::fprintf(stderr, "usage: %s [--layers 784,512,512,10] [--batch 128] [--steps 30] [--serve] [--check]\n", argv[0]);
      return 2;
    }
  }
  const ArrayDict params = examples::init_mlp(layers, 1);
  const Array x = he_uniform({batch, layers.front()}, 3);
  Array y(DType::i32, {batch});
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % layers.back());
  auto f = jit([](const Params& p, const Tensor& xs, const Tensor& ys) {
    const TensorDict g = examples::per_example_gradients(examples::mlp_example_loss, p, xs, ys);
    return examples::clipped_sum(g, examples::clip_factors(examples::per_example_norms(g), 1.0));
  });
  ArrayDict out = f(params, x, y);
  if (check_only) {
    double s = 0;
    const Array& w1 = out["w1"];
    for (int64_t i = 0; i < w1.size(); ++i) s += w1.data<float>()[i];
    std::printf("CHECK w1 sum %.6e\n", s);
    return 0;
  }
  auto time_steps = [&](int n) {
    std::vector<double> us, wall;
    for (int i = 0; i < warmup + n; ++i) {
      const double t0 = thread_cpu_us();
      const int64_t w0 = now_ns();
      f.run_into(out, params, x, y);
      if (i >= warmup) us.push_back(thread_cpu_us() - t0), wall.push_back((now_ns() - w0) * 1e-3);
    }
    std::sort(us.begin(), us.end());
    std::sort(wall.begin(), wall.end());
    std::printf("STEP_US %.1f %.1f %.1f WALL_US %.1f  (%zu steps)\n", us[us.size() / 2], us.front(),
                us.back(), wall[wall.size() / 2], us.size());
    std::fflush(stdout);
  };
  return run_or_serve(serve, steps, time_steps);
}
