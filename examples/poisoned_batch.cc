// A poisoned batch under the skip_step policy: training survives it, the report names it,
// and the result is exactly that of a run that never saw it.
//
//   build/examples/poisoned_batch                     # 2 thread replicas, 300 steps
//   build/examples/poisoned_batch --poison label      # a label out of range instead of a NaN
//   mpirun -np 2 build/examples/poisoned_batch
//
// Run A trains with --on-check-failure skip_step; at step --poison-step (counted from 1, as in
// the progress lines) the rows of the global batch that go to replica --poison-replica are
// poisoned: a NaN pixel (the loss check on that replica fails, and the gradient-norm check
// everywhere after the all-reduce) or a label outside [0, 10) (the label check fails on that
// replica). Every replica skips the step at once, keeping its parameters and optimizer state;
// fjit logs the report: the step, the replicas that raised each check, the message with its
// values, the call site and stack.
// Run B, in the same process, trains on the same batches but simply does not execute that
// step. The program then compares A's and B's parameters and optimizer state byte for byte
// and exits non-zero if they differ (or if A did not skip exactly the poisoned step).
//
// Accepts the options of train_fashion_mnist (see --help) plus --poison nan|label,
// --poison-step N and --poison-replica R.
//
// Replaying the poisoned step (checks/replay.h): run with FJIT_CHECK_DUMP_DIR=DIR and every
// replica that raised writes a bundle DIR/step<N>_replica<R>; then
//   build/examples/poisoned_batch [the same training options] --replay DIR/step149_replica1
// re-traces this program's training step, runs that step again with every automatic check
// and prints the first op that went bad (or the input that brought the bad values), its row
// and its stack. It exits 0 when the replayed step raised a check or an op or input was found,
// 1 when neither, 2 for a bundle of another program.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "lib/trainer.h"

using namespace fjit;
using fjit::examples::Trainer;  // the trainer with the examples' models
using fjit::training::describe;
using fjit::training::first_row_of_replica;
using fjit::training::mesh_from_command_line;
using fjit::training::parse_train_options;
using fjit::training::ParsedOptions;
using fjit::training::TrainOptions;
using fjit::training::train_usage;

namespace {

struct PoisonOptions {
  std::string kind = "nan";
  int64_t step = 149;  // 0-based here; --poison-step is 1-based
  int replica = 1;
  std::string replay;  // a bundle to replay instead of training
};

// Copies `b` and poisons the first row that replica `p.replica` receives (when this process
// feeds that replica).
io::Batch poison(const io::Batch& b, const PoisonOptions& p, const Mesh& mesh) {
  io::Batch out = b.clone();
  const int64_t row = first_row_of_replica(mesh, out, p.replica);
  if (row < 0) return out;
  Array& images = out.columns["images"];
  if (p.kind == "nan") images.data<float>()[row * images.shape()[1] + 400] = NAN;
  else out.columns["labels"].data<int32_t>()[row] = 42;
  return out;
}

struct RunResult {
  std::vector<int64_t> skipped_steps;
  double test_accuracy = -1;
};

// Trains to max_steps; at `p.step` trains on the poisoned batch (poisoned) or executes
// nothing (clean).
RunResult train(Trainer& t, const PoisonOptions& p, bool poisoned, const char* name) {
  RunResult r;
  Progress progress = t.make_progress();
  progress.note(std::string("--- run ") + name);
  while (const io::Batch* b = t.next_batch()) {
    const int64_t step = t.steps_done() - 1;
    if (step == p.step && !poisoned) {
      progress.note(fmt::format("step {}: not executed (the clean run never sees this batch)", step + 1));
      continue;
    }
    StepStats s = step == p.step ? t.train_on(poison(*b, p, t.mesh())) : t.train_on(*b);
    if (s.skipped) r.skipped_steps.push_back(s.step);
    progress.on_step(s);
  }
  r.test_accuracy = t.evaluate();
  progress.note(fmt::format("run {}: {} steps in {}, test accuracy {:.2f}%", name, t.steps_done(),
                            format_duration(progress.elapsed_seconds()), 100 * r.test_accuracy));
  return r;
}

// Byte-for-byte comparison of two dicts; prints one line per tensor where `print`.
bool same(const ArrayDict& a, const ArrayDict& b, const char* what, bool print) {
  bool all = a.names() == b.names();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const bool eq = a.value(i).bit_equal(b.value(i));
    all = all && eq;
    if (print)
      std::printf("  %s %-8s %-16s %s (fingerprint %016llx vs %016llx)\n", what, a.name(i).c_str(),
                  type_str(a.value(i).dtype(), a.value(i).shape()).c_str(), eq ? "identical" : "DIFFERS",
                  static_cast<unsigned long long>(data_fingerprint(a.value(i))),
                  static_cast<unsigned long long>(data_fingerprint(b.value(i))));
  }
  return all;
}

// Splits off this program's own options; the rest go to parse_train_options.
std::string take_poison_options(int& argc, char** argv, PoisonOptions& p) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool ours = arg == "--poison" || arg == "--poison-step" || arg == "--poison-replica" ||
                      arg == "--replay";
    if (!ours) { argv[out++] = argv[i]; continue; }
    if (i + 1 >= argc) return "option " + arg + " needs a value";
    const std::string v = argv[++i];
    char* end = nullptr;
    if (arg == "--replay") {
      p.replay = v;
    } else if (arg == "--poison") {
      if (v != "nan" && v != "label") return "--poison: '" + v + "' is not nan or label";
      p.kind = v;
    } else if (arg == "--poison-step") {
      p.step = std::strtoll(v.c_str(), &end, 10) - 1;
      if (*end || p.step < 0) return "--poison-step: '" + v + "' is not an integer >= 1";
    } else {
      p.replica = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end || p.replica < 0) return "--poison-replica: '" + v + "' is not an integer >= 0";
    }
  }
  argc = out;
  return "";
}

// Replays a bundle of this program's training step (see the top of this file).
int replay_bundle(const std::string& bundle, const TrainOptions& o) {
  try {
    const std::string dir = o.data_dir.empty() ? io::kDebianFashionMnistDir : o.data_dir;
    // The step function is built from the options; the data only have to fit the model.
    Trainer t(Mesh::threads(1), o, io::load_fashion_mnist(dir, "train"));
    const ReplayResult r = replay(bundle, t.train_step().function());
    std::printf("%s", r.text.c_str());
    return r.found || !r.bad_input.empty() || !r.check_report.empty() ? 0 : 1;
  } catch (const ReplayMismatchError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  PoisonOptions poison_options;
  std::string error = take_poison_options(argc, argv, poison_options);
  TrainOptions defaults;
  defaults.max_steps = 300;
  defaults.epochs = 1;
  defaults.log_every = 50;
  defaults.on_check_failure = CheckPolicy::skip_step;
  ParsedOptions parsed = parse_train_options(argc, argv, defaults, examples::model_menu().names);
  if (parsed.help) {
    std::printf("%s\nand: --poison nan|label (nan), --poison-step N (150, from 1), --poison-replica R (1),\n"
                "     --replay BUNDLE_DIR (replay a step written under FJIT_CHECK_DUMP_DIR)\n",
                train_usage(argv[0], defaults, examples::model_menu().names).c_str());
    return 0;
  }
  if (error.empty()) error = parsed.error;
  if (!error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return 2;
  }
  TrainOptions& o = parsed.options;
  if (!poison_options.replay.empty()) return replay_bundle(poison_options.replay, o);
  bool explicit_replicas = config::is_set(config::Id::replicas);
  for (int i = 1; i < argc; ++i) explicit_replicas |= std::strncmp(argv[i], "--replicas", 10) == 0;
  Mesh mesh = mesh_from_command_line(argc, argv);
  if (mesh.processes() == 1 && !explicit_replicas) mesh = Mesh::threads(2);  // the point needs two
  const bool primary = mesh.is_primary();
  if (poison_options.replica >= mesh.size() || o.on_check_failure != CheckPolicy::skip_step ||
      o.checks.value_or(default_check_mode()) == CheckMode::off) {
    if (primary)
      std::fprintf(stderr, "%s: needs --poison-replica below the %d replicas, checks on and the "
                           "skip_step policy\n", argv[0], mesh.size());
    return 2;
  }

  // Keep fjit's log on stderr and also capture it, to show that the report was made.
  std::ostringstream captured;
  auto logger = std::make_shared<spdlog::logger>(
      "fjit", spdlog::sinks_init_list{std::make_shared<spdlog::sinks::stderr_color_sink_mt>(),
                                      std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)});
  logger->set_pattern("[%H:%M:%S.%e] [fjit] [%^%l%$] %v");
  logger->set_level(log().level());
  set_logger(logger);

  try {
    const std::string dir = o.data_dir.empty() ? io::kDebianFashionMnistDir : o.data_dir;
    io::Dataset train_set = io::load_fashion_mnist(dir, "train");
    io::Dataset test_set = io::load_fashion_mnist(dir, "t10k");
    if (primary)
      std::printf("poisoned_batch: %d replica(s) (%s), %lld steps, poison '%s' at step %lld on replica %d\n%s\n",
                  mesh.size(), mesh.description().c_str(), static_cast<long long>(o.max_steps),
                  poison_options.kind.c_str(), static_cast<long long>(poison_options.step + 1),
                  poison_options.replica, describe(o).c_str());
    Trainer a(mesh, o, train_set, test_set);
    RunResult ra = train(a, poison_options, true, "A (poisoned batch, skip_step)");
    const std::string report = captured.str();
    Trainer b(mesh, o, train_set, test_set);
    RunResult rb = train(b, poison_options, false, "B (clean, poisoned step not executed)");

    if (primary) std::printf("\ncomparing run A with run B:\n");
    bool ok = same(a.params(), b.params(), "param", primary);
    ok = same(a.optimizer_state(), b.optimizer_state(), "adamw", primary) && ok;
    const bool skipped_right = ra.skipped_steps == std::vector<int64_t>{poison_options.step} &&
                               rb.skipped_steps.empty();
    const bool reported = report.find("replica") != std::string::npos;
    if (primary) {
      std::printf("\n%s", metrics_report().c_str());
      std::printf("\nrun A skipped step(s):");
      for (int64_t s : ra.skipped_steps) std::printf(" %lld", static_cast<long long>(s + 1));
      std::printf(" (expected %lld)%s\n", static_cast<long long>(poison_options.step + 1),
                  skipped_right ? "" : "  <-- WRONG");
      std::printf("check report logged: %s\n", reported ? "yes (see the log above)" : "NO");
      std::printf("test accuracy A %.2f%%, B %.2f%%\n", 100 * ra.test_accuracy, 100 * rb.test_accuracy);
      std::printf("%s\n", ok ? "RESULT: final parameters and optimizer state are bit-identical to the "
                               "clean run"
                             : "RESULT: runs DIFFER");
    }
    return ok && skipped_right && (reported || !primary) ? 0 : 1;
  } catch (const std::exception& e) {
    if (primary) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
