// The Fashion-MNIST MLP (784-512-256-10, ReLU, AdamW with a cosine schedule, as
// train_fashion_mnist) trained with DP-SGD, data-parallel (lib/dp_sgd.h): per-example
// gradients from vmap(grad(loss of one example)), each clipped to L2 norm --dp-clip C,
// summed over the replicas, Gaussian noise N(0, (sigma C)^2) with sigma = --dp-noise drawn
// once for the global batch from the step's key, divided by the global batch size.
//
//   build/examples/train_dpsgd --epochs 2 --dp-clip 1 --dp-noise 1.1
//   build/examples/train_dpsgd --replicas 2 ...            # two thread replicas
//   mpirun -np 2 build/examples/train_dpsgd ...            # one replica per MPI rank
//
// A separate program rather than a mode of the trainer: the DP step has no mean gradient to
// all-reduce, check or accumulate, and none of the trainer's loss scaling, ZeRO or checkpoint
// machinery applies to it. It prints the test accuracy, the median step time, and a hash of
// the final parameters (equal with threads and with MPI ranks of the same count).
//
// Exit codes: 0 done; 1 bad data or another error; 2 bad command line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/io/idx.h"
#include "lib/dp_sgd.h"
#include "lib/models.h"
#include "parallel/train/train_main.h"

using namespace fjit;

namespace {

struct Options {
  double clip = 1.0, noise = 1.1, lr = 1e-3, weight_decay = 1e-4;
  int64_t epochs = 2, batch_size = 128, max_steps = -1, log_every = 100;
  uint64_t seed = 0;
  std::string data_dir = io::kDebianFashionMnistDir;
};

const char* kUsage =
    "usage: %s [--replicas N] [--epochs 2] [--batch-size 128] [--lr 1e-3] [--weight-decay 1e-4]\n"
    "          [--dp-clip 1] [--dp-noise 1.1] [--seed 0] [--max-steps -1] [--log-every 100]\n"
    "          [--data-dir /usr/share/datasets/fashion-mnist]\n";

// Returns an empty string, or what is wrong with the command line.
std::string parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help") return "help";
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return arg + " needs a value";
    }
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && *end == '\0';
    if (arg == "--data-dir") { o.data_dir = value; continue; }
    if (arg == "--replicas") continue;  // read by the mesh
    if (!number) return arg + ": not a number: " + value;
    if (arg == "--dp-clip") o.clip = v;
    else if (arg == "--dp-noise") o.noise = v;
    else if (arg == "--lr") o.lr = v;
    else if (arg == "--weight-decay") o.weight_decay = v;
    else if (arg == "--epochs") o.epochs = static_cast<int64_t>(v);
    else if (arg == "--batch-size") o.batch_size = static_cast<int64_t>(v);
    else if (arg == "--max-steps") o.max_steps = static_cast<int64_t>(v);
    else if (arg == "--log-every") o.log_every = static_cast<int64_t>(v);
    else if (arg == "--seed") o.seed = static_cast<uint64_t>(v);
    else return "unknown option " + arg;
  }
  if (!(o.clip > 0)) return "--dp-clip must be positive";
  if (!(o.noise >= 0)) return "--dp-noise must be >= 0";
  if (o.epochs < 1 || o.batch_size < 1) return "--epochs and --batch-size must be >= 1";
  return "";
}

uint64_t fnv1a(const ArrayDict& params) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(params.value(i).raw());
    for (size_t j = 0; j < params.value(i).nbytes(); ++j) h = (h ^ p[j]) * 1099511628211ull;
  }
  return h;
}

int run(Mesh& mesh, const Options& o) {
  const bool primary = mesh.is_primary();
  io::Dataset train = io::load_fashion_mnist(o.data_dir, "train", DType::f32);
  io::Dataset test = io::load_fashion_mnist(o.data_dir, "t10k", DType::f32);
  io::BatchIterator batches(train, {.batch_size = o.batch_size, .seed = o.seed, .shuffle = true,
                                    .drop_last = true, .shard = mesh.data_shard()});
  const int64_t per_epoch = batches.batches_per_epoch();
  int64_t total = per_epoch * o.epochs;
  if (o.max_steps >= 0) total = std::min(total, o.max_steps);
  examples::DpSgdStepFn fn;
  fn.optimizer = AdamW{.weight_decay = o.weight_decay};
  fn.schedule = Schedule::cosine(o.lr, total);
  fn.clip = o.clip;
  fn.noise = o.noise;
  fn.seed = o.seed;
  examples::DpSgdStep step = examples::make_dp_sgd_step(mesh, fn);
  const examples::ModelSpec spec;
  ArrayDict params = mesh.replicate(examples::init_model(spec, o.seed));
  ArrayDict state = fn.optimizer.init_state(params);
  if (primary)
    std::printf("fjit train_dpsgd: %d replica(s) (%s) | %lld train / %lld test examples from %s\n"
                "DP-SGD: clip C=%g, noise sigma=%g, batch %lld, %lld epochs (%lld steps), lr %g\n",
                mesh.size(), mesh.description().c_str(), static_cast<long long>(train.size()),
                static_cast<long long>(test.size()), o.data_dir.c_str(), o.clip, o.noise,
                static_cast<long long>(o.batch_size), static_cast<long long>(o.epochs),
                static_cast<long long>(total), o.lr);
  std::vector<double> step_ms;
  const int64_t start = now_ns();
  for (int64_t s = 0; s < total; ++s) {
    if (s > 0 && s % per_epoch == 0) batches.set_epoch(s / per_epoch);
    const io::Batch* b = batches.next();
    const int64_t t0 = now_ns();
    auto [p2, s2, loss, clipped] = step(params, state, (*b)["images"], (*b)["labels"],
                                        Array::scalar(static_cast<int32_t>(s)));
    params = std::move(p2);
    state = std::move(s2);
    const double ms = (now_ns() - t0) * 1e-6;
    if (s > 0) step_ms.push_back(ms);  // the first step traces and compiles
    if (primary && o.log_every > 0 && (s + 1) % o.log_every == 0)
      std::printf("step %lld/%lld loss %.4f clipped %.0f%%\n", static_cast<long long>(s + 1),
                  static_cast<long long>(total), loss.item<double>(), 100 * clipped.item<double>());
  }
  const double seconds = (now_ns() - start) * 1e-9;
  training::EvalStep eval = training::make_eval_step(mesh, {}, examples::classifier(spec));
  const double accuracy = training::evaluate_accuracy(eval, mesh, params, test);
  if (primary) {
    std::sort(step_ms.begin(), step_ms.end());
    const double median = step_ms.empty() ? 0 : step_ms[step_ms.size() / 2];
    std::printf("trained %lld steps in %.1fs, median step %.2f ms\nparams hash %016llx\n"
                "final test accuracy: %.2f%%\n",
                static_cast<long long>(total), seconds, median,
                static_cast<unsigned long long>(fnv1a(params)), 100 * accuracy);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const std::string error = parse(argc, argv, o);
  if (error == "help") {
    std::printf(kUsage, argv[0]);
    return 0;
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    std::fprintf(stderr, kUsage, argv[0]);
    return 2;
  }
  return training::run_training_job(argc, argv, [&](Mesh& mesh) { return run(mesh, o); });
}
