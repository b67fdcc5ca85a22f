// The training steps of bench/model_step.cc and bench/lm_step.cc in LibTorch (C++), timed
// alone: the LibTorch side of the interleaved comparison bench/jax_step.py runs (optional:
// built only when CMake is given a LibTorch, bench/CMakeLists.txt).
//
//   build/bench/libtorch_step --model cnn --steps 30 [--threads 1]   # one STEP_US line
//   build/bench/libtorch_step --model cnn --serve                    # step counts from stdin
//   build/bench/libtorch_step --model cnn --check F.bin              # from model_step's F.bin
//   build/bench/libtorch_step --model lm --compute-dtype bf16        # the forward under autocast
//
// Models (bench/libtorch_models.h), with model_step's batches and optimizers:
//   mlp-sgd   MLP 784-512-512-10, batch 128, torch::optim::SGD lr 0.01
//   mlp-adam  the same with torch::optim::Adam (lr 1e-3)
//   mlp-small MLP 64-128-10, batch 64, SGD lr 0.01
//   cnn       the CNN, batch 128 of u8 pixels, torch::optim::AdamW (lr 1e-3), dropout 0.3
//   vit       the ViT, batch 128 of u8 pixels, AdamW, dropout 0.1
//   lm        lm_step's decoder (6 layers, d 384, 6 heads, context 256, vocab 256), batch 8,
//             clip_grad_norm_ to 1, AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1)
// A step is zero_grad, forward, mean cross entropy, backward, (clipping,) optimizer step.
// --threads N: at::set_num_threads(N) (pinning is the caller's: the comparison script pins
// itself and its children). Printed, as model_step: the stepping thread's CPU time per step
// (median, min, max over --steps after --warmup steps) and the median wall time. --serve and
// --check are model_step's: each stdin line a number of steps to time; --check loads the
// parameters and the batch fjit wrote to the file, turns dropout off and prints the losses
// of the first three steps ("LOSSES <l1> <l2> <l3>").
// --compute-dtype bf16 runs each forward pass under CPU autocast to bf16 (AutocastCpu below, what
// torch.autocast("cpu", torch.bfloat16) does in Python, as bench/pytorch_step.py uses it): the
// products (linear, matmul, convolutions, scaled_dot_product_attention) on bf16 operands, the
// parameters, their gradients and the optimizer state f32; the loss is taken in f32 outside it.
#include "bench/libtorch_models.h"
#include "bench/serve_steps.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

using namespace libtorch_bench;

namespace {

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

double wall_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

// bench/array_file.h's format: "<name> <dtype> <rank> <dim>...\n", then the raw bytes.
Named read_array_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("libtorch_step: cannot open " + path);
  Named out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream head(line);
    std::string name, dtype;
    int rank = 0;
    head >> name >> dtype >> rank;
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) head >> d;
    const auto type = dtype == "f32" ? torch::kFloat : dtype == "u8" ? torch::kByte : torch::kInt;
    if (!head || (dtype != "f32" && dtype != "u8" && dtype != "i32"))
      throw std::runtime_error("libtorch_step: " + path + ": bad header line '" + line + "'");
    torch::Tensor t = torch::empty(dims, type);
    f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    if (!f) throw std::runtime_error("libtorch_step: " + path + ": " + name + " is cut short");
    out[name] = t;
  }
  return out;
}

// torch.autocast("cpu", dtype=torch.bfloat16) as a scope: autocast on for CPU with bf16 as its
// lower precision while it lives; leaving the outermost one drops the cache of cast weights
// (the weights change at every step), as Python's autocast.__exit__ does.
class AutocastCpu {
 public:
  explicit AutocastCpu(bool on) : on_(on) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(at::kCPU);
    was_dtype_ = at::autocast::get_autocast_dtype(at::kCPU);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::increment_nesting();
  }
  ~AutocastCpu() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCPU, was_dtype_);
  }
  AutocastCpu(const AutocastCpu&) = delete;
  AutocastCpu& operator=(const AutocastCpu&) = delete;

 private:
  bool on_, was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// One model's step: its module, its batch, its optimizer.
struct Step {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  torch::Tensor x, y;  // y i64, flattened
  std::unique_ptr<torch::optim::Optimizer> opt;
  double clip = 0;
  bool bf16 = false;  // the forward under AutocastCpu

  torch::Tensor run() {
    opt->zero_grad();
    torch::Tensor logits;
    {
      AutocastCpu autocast(bf16);
      logits = forward(x);
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat).view({y.size(0), -1}), y);
    loss.backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(module->parameters(), clip);
    opt->step();
    return loss;
  }
};

template <class M>
void bind(Step& s, M m) {
  s.module = m.ptr();
  s.forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
}

// false when `model` is none of the above. `check`: the parameters and batch of fjit's
// start (empty: torch's own initialization and a batch built as model_step builds its).
bool make_step(const std::string& model, const Named& check, Step* s) {
  const bool loaded = !check.empty();
  int64_t batch = 128, features = 784;
  if (model == "mlp-sgd" || model == "mlp-adam" || model == "mlp-small") {
    const bool small = model == "mlp-small";
    if (small) batch = 64, features = 64;
    Mlp m(small ? std::vector<int64_t>{64, 128, 10} : std::vector<int64_t>{784, 512, 512, 10});
    if (loaded) m->load(check);
    bind(*s, m);
    s->x = torch::rand({batch, features}) * 2 - 1;
  } else if (model == "cnn" || model == "vit") {
    const double dropout = loaded ? 0.0 : model == "cnn" ? 0.3 : 0.1;
    if (model == "cnn") {
      Cnn m(dropout);
      if (loaded) m->load(check);
      bind(*s, m);
    } else {
      Vit m(dropout);
      if (loaded) m->load(check);
      bind(*s, m);
    }
    s->x = (torch::arange(batch * features, torch::kLong) * 37).remainder(256).to(torch::kByte).view({batch, features});
  } else if (model == "lm") {
    const int64_t b = 8, t = 256, vocab = 256;
    Decoder m(vocab, t, 384, 6, 6);
    if (loaded) m->load(check);
    bind(*s, m);
    const torch::Tensor i = torch::arange(b * t, torch::kLong);
    s->x = (i * 37 + 11).remainder(vocab).view({b, t});
    s->y = (i * 37 + 48).remainder(vocab);
    s->clip = 1.0;
    s->opt = std::make_unique<torch::optim::AdamW>(
        s->module->parameters(), torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1));
  } else {
    return false;
  }
  if (model != "lm") s->y = (torch::arange(batch, torch::kLong) * 7).remainder(10);
  if (loaded) {
    s->x = take(check, "input/x").to(model == "lm" ? torch::kLong : s->x.scalar_type());
    s->y = take(check, "input/y").to(torch::kLong).flatten();
  }
  const auto params = s->module->parameters();
  if (model == "mlp-sgd" || model == "mlp-small")
    s->opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01));
  else if (model == "mlp-adam")
    s->opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
  else if (model != "lm")
    s->opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
  s->module->train();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "cnn", check_file, dtype = "f32";
  int steps = 30, warmup = 5, threads = 1;
  bool serve = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--serve")) serve = true;
    else if (i + 1 >= argc) steps = 0;
    else if (!std::strcmp(argv[i], "--model")) model = argv[++i];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--check")) check_file = argv[++i];
    else if (!std::strcmp(argv[i], "--compute-dtype")) dtype = argv[++i];
    else steps = 0;
  }
  at::set_num_threads(std::max(1, threads));
  at::set_num_interop_threads(1);
  torch::manual_seed(7);
  Step s;
  try {
    const Named check = check_file.empty() ? Named{} : read_array_file(check_file);
    if (steps < 1 || (dtype != "f32" && dtype != "bf16") || !make_step(model, check, &s)) {
      std::fprintf(stderr, "usage: %s --model mlp-sgd|mlp-adam|mlp-small|cnn|vit|lm [--steps N] "
                           "[--warmup N] [--threads N] [--serve] [--check FILE] [--compute-dtype f32|bf16]\n", argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  s.bf16 = dtype == "bf16";
  if (!check_file.empty()) {
    std::printf("LOSSES");
    for (int i = 0; i < 3; ++i) std::printf(" %.6f", s.run().item<double>());
    std::printf("  (LibTorch %s, %s, %s, dropout off)\n", TORCH_VERSION, model.c_str(), dtype.c_str());
    return 0;
  }
  torch::Tensor loss = s.run();
  auto time_steps = [&](int n) {
    std::vector<double> us, wall;
    for (int i = 0; i < warmup + n; ++i) {
      const double t0 = thread_cpu_us(), w0 = wall_us();
      loss = s.run();
      const double t = thread_cpu_us() - t0;
      if (i >= warmup) us.push_back(t), wall.push_back(wall_us() - w0);
    }
    std::sort(us.begin(), us.end());
    std::sort(wall.begin(), wall.end());
    std::printf("STEP_US %.1f %.1f %.1f WALL_US %.1f  (LibTorch %s, %d thread(s), %s %s, %zu steps, loss %.4f)\n",
                us[us.size() / 2], us.front(), us.back(), wall[wall.size() / 2], TORCH_VERSION,
                at::get_num_threads(), model.c_str(), dtype.c_str(), us.size(), loss.item<double>());
    std::fflush(stdout);
  };
  return run_or_serve(serve, steps, time_steps);
}
