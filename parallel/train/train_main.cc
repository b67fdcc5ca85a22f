#include "parallel/train/train_main.h"

#include <cstdio>
#include <exception>
#include <optional>

#include "core/base/metrics.h"
#include "core/io/idx.h"
#include "core/io/progress.h"
#include "core/runtime/step_checks.h"
#include "parallel/train/trainer.h"

namespace fjit::training {
namespace {

int train(Mesh& mesh, TrainOptions options, const char* program, const ModelMenu& models) {
  const bool primary = mesh.is_primary();
  const std::string dir = options.data_dir.empty() ? io::kDebianFashionMnistDir : options.data_dir;
  const int64_t t0 = now_ns();
  Model model = models.build(options);
  // A model may take the file's bytes and scale them in the step (model.pixels).
  io::Dataset train_set = io::load_fashion_mnist(dir, "train", model.pixels);
  io::Dataset test_set = io::load_fashion_mnist(dir, "t10k", model.pixels);
  if (primary)
    std::printf("fjit %s: %d replica(s) (%s) | %lld train / %lld test examples from %s "
                "(loaded in %.1fs)\n%s\n",
                program, mesh.size(), mesh.description().c_str(),
                static_cast<long long>(train_set.size()),
                static_cast<long long>(test_set.size()), dir.c_str(), (now_ns() - t0) * 1e-9,
                describe(options).c_str());
  Trainer trainer(mesh, std::move(options), std::move(model), std::move(train_set),
                  std::move(test_set));
  const int64_t start = now_ns();
  const double accuracy = trainer.run();
  const double seconds = (now_ns() - start) * 1e-9;
  if (primary) {
    std::printf("\n%s", metrics_report().c_str());
    const int64_t steps = trainer.steps_this_run();
    std::printf("\ntrained %lld steps in %s (%.0f samples/s)", static_cast<long long>(steps),
                format_duration(seconds).c_str(),
                seconds > 0 ? steps * trainer.options().batch_size / seconds : 0.0);
    if (steps != trainer.steps_done())
      std::printf(", %lld in all", static_cast<long long>(trainer.steps_done()));
    if (!trainer.options().checkpoint_dir.empty())
      std::printf("; checkpoints in %s", trainer.options().checkpoint_dir.c_str());
    if (accuracy >= 0) std::printf("\nfinal test accuracy: %.2f%%\n", 100 * accuracy);
    else std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int run_training_job(int argc, char** argv, const std::function<int(Mesh&)>& job) {
  std::optional<Mesh> maybe_mesh;
  try {
    maybe_mesh = mesh_from_command_line(argc, argv);  // "--replicas N" or "--replicas=N"
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
  Mesh& mesh = *maybe_mesh;
  try {
    return job(mesh);
  } catch (const CheckError& e) {
    // Raised on every replica at the same step; the report has been logged once already.
    if (mesh.is_primary())
      std::fprintf(stderr, "training stopped: a check failed at step %lld (--on-check-failure "
                           "skip_step or log to continue past it)\n",
                   static_cast<long long>(e.step()));
    return 1;
  } catch (const std::exception& e) {
    if (mesh.is_primary()) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

int train_main(int argc, char** argv, const char* program, const TrainOptions& defaults,
               const ModelMenu& models) {
  ParsedOptions parsed = parse_train_options(argc, argv, defaults, models.names);
  if (parsed.help) {
    std::printf("%s", train_usage(argv[0], defaults, models.names).c_str());
    return 0;
  }
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], parsed.error.c_str());
    return 2;
  }
  parsed.options.command_line.assign(argv + 1, argv + argc);
  return run_training_job(argc, argv, [&](Mesh& mesh) {
    return train(mesh, std::move(parsed.options), program, models);
  });
}

}  // namespace fjit::training
