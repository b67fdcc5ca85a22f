// End to end: the trainer of parallel/train with the examples' models (the code the main job
// runs) on the committed 16-example fixture, with two thread replicas: the loss falls while replicas stay
// bitwise identical (divergence check every step), a resumed run reproduces the uninterrupted
// one bit for bit, a poisoned batch under skip_step leaves exactly the state of a run that never
// saw it, and the command-line parser rejects what it should.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "lib/trainer.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit::examples {
namespace {

using testing::expect_bit_equal;

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

using fjit::testing::error_of;

using fjit::testing::fixture;

TrainOptions small_options() {
  TrainOptions o;
  o.batch_size = 8;  // 2 batches per epoch of the 16-example fixture, 4 rows per replica
  o.epochs = 100;
  o.max_steps = 6;
  o.seed = 3;
  o.log_every = 0;
  o.divergence_check_every = 1;
  o.eval_batch_size = 6;  // 16 = 6 + 6 + 4: exercises a smaller last batch
  return o;
}

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("fjit_train_e2e_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Trains `steps` steps, returning the losses.
std::vector<float> train_steps(Trainer& t, int steps) {
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    std::optional<StepStats> s = t.step();
    if (!s) break;
    EXPECT_FALSE(s->skipped);
    losses.push_back(s->loss);
  }
  return losses;
}

TEST(TrainE2e, LossFallsAndReplicasAgree) {
  TrainOptions o = small_options();
  o.max_steps = 8;
  Trainer t(Mesh::threads(2), o, fixture(), fixture());
  const double before = t.evaluate();
  std::vector<float> losses = train_steps(t, 8);  // divergence check: throws if replicas differ
  ASSERT_EQ(losses.size(), 8u);
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_GT(losses[0] + losses[1], 2.0f * 1.5f) << "starts near log(10)";
  EXPECT_LT(losses[6] + losses[7], 0.5f * (losses[0] + losses[1]))
      << "first " << losses[0] << ", " << losses[1] << "; last " << losses[6] << ", " << losses[7];
  EXPECT_TRUE(t.done());
  EXPECT_FALSE(t.step().has_value());
  const double after = t.evaluate();
  EXPECT_GT(after, before);
  EXPECT_GE(after, 0.75) << "16 training examples, evaluated on themselves";
  EXPECT_EQ(t.train_step().jit_core().compile_count(), 1) << "every step has the same signature";
}

TEST(TrainE2e, ResumeReproducesUninterruptedRunBitForBit) {
  const TrainOptions o = small_options();
  Trainer straight(Mesh::threads(2), o, fixture());
  std::vector<float> all = train_steps(straight, 6);
  ASSERT_EQ(all.size(), 6u);

  const auto dir = fresh_dir("resume");
  const std::string path = (dir / "ckpt.safetensors").string();
  {
    Trainer first(Mesh::threads(2), o, fixture());
    std::vector<float> head = train_steps(first, 3);  // stops mid-epoch (2 batches per epoch)
    first.save(path);
    EXPECT_EQ(head, std::vector<float>(all.begin(), all.begin() + 3));
  }
  TrainOptions other_seed = o;
  other_seed.seed = 99;  // the checkpoint's seed wins: same initial data order as the run it continues
  Trainer resumed(Mesh::threads(2), other_seed, fixture());
  resumed.load(path);
  EXPECT_EQ(resumed.steps_done(), 3);
  EXPECT_EQ(resumed.epoch(), 1);
  EXPECT_EQ(resumed.batch_in_epoch(), 1);
  std::vector<float> tail = train_steps(resumed, 3);
  EXPECT_EQ(tail, std::vector<float>(all.begin() + 3, all.end()));
  expect_bit_equal(resumed.params(), straight.params(), "param");
  expect_bit_equal(resumed.optimizer_state(), straight.optimizer_state(), "optimizer state");
  std::filesystem::remove_all(dir);
}

// The same through run(): periodic checkpoints, then --resume from the latest one.
TEST(TrainE2e, RunResumesFromLatestCheckpoint) {
  const auto dir = fresh_dir("run");
  TrainOptions o = small_options();
  o.checkpoint_dir = dir.string();
  o.checkpoint_every = 2;
  o.max_steps = 3;
  Trainer first(Mesh::threads(2), o, fixture(), fixture());
  first.run();  // checkpoints at steps 2 and 3 (the end)
  EXPECT_TRUE(std::filesystem::exists(io::checkpoint_path(o.checkpoint_dir, 2)));
  EXPECT_EQ(io::latest_checkpoint(o.checkpoint_dir), io::checkpoint_path(o.checkpoint_dir, 3));

  o.max_steps = 6;
  o.resume = true;
  Trainer second(Mesh::threads(2), o, fixture(), fixture());
  const double accuracy = second.run();
  EXPECT_EQ(second.steps_done(), 6);
  EXPECT_GE(accuracy, 0.0);
  EXPECT_EQ(io::latest_checkpoint(o.checkpoint_dir), io::checkpoint_path(o.checkpoint_dir, 6));

  TrainOptions plain = small_options();
  Trainer straight(Mesh::threads(2), plain, fixture());
  train_steps(straight, 6);
  expect_bit_equal(second.params(), straight.params(), "param");
  expect_bit_equal(second.optimizer_state(), straight.optimizer_state(), "optimizer state");

  // A checkpoint of another model is refused with the difference named, and the file.
  const std::string last = io::checkpoint_path(o.checkpoint_dir, 6);
  TrainOptions wide = small_options();
  wide.layers = {784, 64, 10};
  Trainer other(Mesh::threads(2), wide, fixture());
  std::string error = error_of([&] { other.load(last); });
  EXPECT_EQ(error, last + ": the checkpoint holds model mlp 784,512,256,10, this run's is mlp "
                          "784,64,10: it cannot be resumed with another model");
  // Overriding the configuration check cannot make the tensors fit.
  wide.allow_config_change = true;
  Trainer forced(Mesh::threads(2), wide, fixture());
  error = error_of([&] { forced.load(last); });
  EXPECT_NE(error.find(last + ": incompatible checkpoint"), std::string::npos) << error;
  EXPECT_NE(error.find("params/w1 f32[784,512], model expects f32[784,64]"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

TEST(TrainE2e, ResumeWithOtherOptimizerSettingsIsRefusedUnlessAllowed) {
  const auto dir = fresh_dir("config");
  const std::string path = (dir / "ckpt.safetensors").string();
  TrainOptions o = small_options();
  {
    Trainer first(Mesh::threads(2), o, fixture());
    train_steps(first, 2);
    first.save(path);
  }
  TrainOptions changed = o;
  changed.lr = 5e-3;
  changed.lr_schedule = "constant";
  Trainer refused(Mesh::threads(2), changed, fixture());
  const std::string error = error_of([&] { refused.load(path); });
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("optimizer: checkpoint AdamW lr 0.001 weight decay 0.0001, now AdamW lr 0.005"),
            std::string::npos) << error;
  EXPECT_NE(error.find("lr_schedule: checkpoint cosine, now constant"), std::string::npos) << error;
  EXPECT_EQ(refused.steps_done(), 0) << "a refused resume leaves the trainer as it was";

  changed.allow_config_change = true;
  Trainer allowed(Mesh::threads(2), changed, fixture());
  allowed.load(path);
  EXPECT_EQ(allowed.steps_done(), 2);
  EXPECT_DOUBLE_EQ(allowed.learning_rate(2), 5e-3);
  std::filesystem::remove_all(dir);
}

// Gradient accumulation: 2 micro-batches per replica shard train as one batch does, up to
// float32 rounding of the summation order.
TEST(TrainE2e, MicroBatchesTrainAsTheWholeBatch) {
  TrainOptions o = small_options();
  o.divergence_check_every = 0;
  Trainer whole(Mesh::threads(2), o, fixture());
  o.micro_batches = 2;
  Trainer split(Mesh::threads(2), o, fixture());
  const std::vector<float> a = train_steps(whole, 6), b = train_steps(split, 6);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::abs(a[i])) << "step " << i;
  // Adam normalizes each coordinate's step to about lr, so where a gradient is near zero its
  // rounding can move a weight by up to lr a step; on the whole the weights agree closely.
  double diff = 0;
  int64_t count = 0;
  for (size_t i = 0; i < whole.params().size(); ++i) {
    const std::vector<float> p = whole.params().value(i).to_vector<float>();
    const std::vector<float> q = split.params().value(i).to_vector<float>();
    for (size_t k = 0; k < p.size(); ++k) {
      ASSERT_LE(std::abs(p[k] - q[k]), 2 * 6 * o.lr) << whole.params().name(i) << "[" << k << "]";
      diff += std::abs(p[k] - q[k]);
      ++count;
    }
  }
  EXPECT_LT(diff / count, 1e-6) << "mean absolute difference of the weights";
  EXPECT_FALSE(whole.params().value(0).bit_equal(split.params().value(0)))
      << "the split step sums in another order, so some bits should differ";
  o.micro_batches = 5;  // 4 rows per replica cannot make 5 micro-batches
  EXPECT_NE(error_of<std::invalid_argument>([&] { Trainer t(Mesh::threads(2), o, fixture()); }).find("micro-batches"),
            std::string::npos);
}

io::Batch poisoned(const Mesh& mesh, const io::Batch& b, int replica, bool nan) {
  io::Batch out = b.clone();
  const int64_t row = first_row_of_replica(mesh, out, replica);
  if (nan) out.columns["images"].data<float>()[row * 784 + 100] = NAN;
  else out.columns["labels"].data<int32_t>()[row] = -3;
  return out;
}

// Trains max_steps; at step `bad` (0-based) either trains on a poisoned batch or skips it.
void run_with_poison(Trainer& t, int64_t bad, bool poison, bool nan, std::vector<int64_t>* skipped) {
  while (const io::Batch* b = t.next_batch()) {
    const int64_t step = t.steps_done() - 1;
    if (step == bad && !poison) continue;
    StepStats s = step == bad ? t.train_on(poisoned(t.mesh(), *b, 1, nan)) : t.train_on(*b);
    if (s.skipped) skipped->push_back(s.step);
  }
}

TEST(TrainE2e, PoisonedBatchIsSkippedExactly) {
  for (bool nan : {true, false}) {
    SCOPED_TRACE(nan ? "NaN pixel" : "label out of range");
    TrainOptions o = small_options();
    o.on_check_failure = CheckPolicy::skip_step;
    std::vector<int64_t> skipped_a, skipped_b;
    Trainer a(Mesh::threads(2), o, fixture());
    run_with_poison(a, 2, true, nan, &skipped_a);
    Trainer b(Mesh::threads(2), o, fixture());
    run_with_poison(b, 2, false, nan, &skipped_b);
    EXPECT_EQ(skipped_a, std::vector<int64_t>{2});
    EXPECT_TRUE(skipped_b.empty());
    EXPECT_EQ(a.steps_done(), 6);
    expect_bit_equal(a.params(), b.params(), "param");
    expect_bit_equal(a.optimizer_state(), b.optimizer_state(), "optimizer state");
  }
}

TEST(TrainE2e, ThrowPolicyStopsAtThePoisonedBatchWithStateIntact) {
  TrainOptions o = small_options();
  o.on_check_failure = CheckPolicy::throw_error;
  Trainer t(Mesh::threads(2), o, fixture());
  train_steps(t, 1);
  std::vector<Array> before;
  for (const auto& kv : t.params()) before.push_back(kv.second.clone());
  const io::Batch* b = t.next_batch();
  ASSERT_NE(b, nullptr);
  try {
    t.train_on(poisoned(t.mesh(), *b, 1, false));
    ADD_FAILURE() << "a label out of range passed the check";
  } catch (const CheckError& e) {
    const std::string report = e.what();
    EXPECT_NE(report.find("labels must be classes in [0, 10)"), std::string::npos) << report;
    EXPECT_NE(report.find("min -3"), std::string::npos) << report;
    EXPECT_NE(report.find("replica 1"), std::string::npos) << report;
    // The step is fjit's library (parallel/train): the site is the user's frame that traced it.
    EXPECT_NE(report.find("train_e2e_test.cc"), std::string::npos) << report;
  }
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(t.params().value(i).bit_equal(before[i]));
  // Training goes on from the intact state.
  EXPECT_TRUE(t.step().has_value());
}

TEST(TrainE2e, WithChecksOffNothingIsCompiledIn) {
  TrainOptions o = small_options();
  o.checks = CheckMode::off;
  Trainer t(Mesh::threads(2), o, fixture());
  train_steps(t, 1);
  EXPECT_EQ(t.train_step().jit_core().last_entry()->exe->num_check_sites(), 0);
  o.checks = CheckMode::user;
  Trainer u(Mesh::threads(2), o, fixture());
  train_steps(u, 1);
  EXPECT_EQ(u.train_step().jit_core().last_entry()->exe->num_check_sites(), 3);
}

TEST(TrainE2e, MissingDataIsAClearError) {
  try {
    io::load_fashion_mnist(fjit::testing::fixture_dir() + "/no-such-dir", "train");
    FAIL() << "loading a missing file succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir"), std::string::npos) << e.what();
  }
}

ParsedOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_options(static_cast<int>(argv.size()), argv.data(), {}, model_menu().names);
}

TEST(TrainOptionsParser, ParsesEveryKindOfValue) {
  ParsedOptions p = parse({"--epochs", "3", "--batch-size=64", "--lr", "3e-4", "--seed", "7",
                           "--checks", "all", "--on-check-failure", "skip_step", "--resume",
                           "--checkpoint-dir", "/tmp/x", "--layers", "784,32,10", "--replicas", "2",
                           "--checkpoint-every=50", "--lr-schedule", "constant"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.options.epochs, 3);
  EXPECT_EQ(p.options.batch_size, 64);
  EXPECT_DOUBLE_EQ(p.options.lr, 3e-4);
  EXPECT_EQ(p.options.seed, 7u);
  EXPECT_EQ(p.options.checks, CheckMode::all);
  EXPECT_EQ(p.options.on_check_failure, CheckPolicy::skip_step);
  EXPECT_TRUE(p.options.resume);
  EXPECT_EQ(p.options.checkpoint_dir, "/tmp/x");
  EXPECT_EQ(p.options.checkpoint_every, 50);
  EXPECT_EQ(p.options.replicas, 2);
  EXPECT_EQ(p.options.lr_schedule, "constant");
  EXPECT_EQ(p.options.layers, (std::vector<int64_t>{784, 32, 10}));
  EXPECT_TRUE(parse({"--help"}).help);
  ParsedOptions more = parse({"--micro-batches", "4", "--warmup-steps=10", "--allow-config-change",
                              "--lr-schedule", "step"});
  ASSERT_TRUE(more.error.empty()) << more.error;
  EXPECT_EQ(more.options.micro_batches, 4);
  EXPECT_EQ(more.options.warmup_steps, 10);
  EXPECT_TRUE(more.options.allow_config_change);
  // The run's schedule: warm-up to the peak, then a step decay over the rest.
  const Schedule lr = learning_rate_schedule(more.options, 310);
  EXPECT_DOUBLE_EQ(lr(5), 0.5 * more.options.lr);
  EXPECT_DOUBLE_EQ(lr(10), more.options.lr);
  EXPECT_NEAR(lr(10 + 100), 0.1 * more.options.lr, 1e-15);
  const std::string usage = train_usage("train");
  for (const char* option : {"--epochs", "--micro-batches", "--allow-config-change", "--lr-schedule"})
    EXPECT_NE(usage.find(option), std::string::npos) << option << " missing from --help";
}

TEST(TrainOptionsParser, RejectsBadInput) {
  EXPECT_NE(parse({"--epochs", "0"}).error.find("--epochs"), std::string::npos);
  EXPECT_NE(parse({"--lr", "fast"}).error.find("'fast'"), std::string::npos);
  EXPECT_NE(parse({"--checks", "some"}).error.find("off, user, all or fpe"), std::string::npos);
  EXPECT_NE(parse({"--on-check-failure", "retry"}).error.find("throw, skip_step or log"),
            std::string::npos);
  EXPECT_NE(parse({"--batch-size", "-4"}).error.find("--batch-size"), std::string::npos);
  EXPECT_NE(parse({"--seed", "-1"}).error.find("unsigned"), std::string::npos);
  EXPECT_NE(parse({"--replicas", "0"}).error.find("--replicas"), std::string::npos);
  EXPECT_NE(parse({"--bogus"}).error.find("unknown option '--bogus'"), std::string::npos);
  EXPECT_NE(parse({"--epochs"}).error.find("needs a value"), std::string::npos);
  EXPECT_NE(parse({"--epochs", "1e3"}).error.find("'1e3' is not an integer >= 1"), std::string::npos);
  EXPECT_NE(parse({"--lr", "0.1x"}).error.find("'0.1x'"), std::string::npos);
  EXPECT_NE(parse({"--lr-schedule", "linear"}).error.find("cosine, constant or step"),
            std::string::npos);
  EXPECT_NE(parse({"--resume"}).error.find("--checkpoint-dir"), std::string::npos);
  EXPECT_FALSE(parse({"--layers", "784"}).error.empty());
  // Found by tests/fuzz/command_line_fuzzer: from_chars reads "inf" and "nan" as numbers.
  for (const char* option : {"--lr", "--weight-decay", "--max-grad-norm", "--dropout"})
    for (const char* value : {"inf", "infinity", "nan"})
      EXPECT_NE(parse({option, value}).error.find("is not a finite number >= 0"), std::string::npos)
          << option << " " << value;
  EXPECT_NE(parse({"--examples-per-process", "30,x"}).error.find("'30,x' is not counts like"),
            std::string::npos);
}

TEST(TrainOptionsParser, ExamplesPerProcessTakesCountsIncludingZero) {
  ParsedOptions p = parse({"--examples-per-process", "30000,0,12"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.options.examples_per_process, (std::vector<int64_t>{30000, 0, 12}));
  EXPECT_NE(describe(p.options).find("examples per process 30000,0,12"), std::string::npos);
  EXPECT_EQ(run_config(p.options).at("examples_per_process"), "30000,0,12");
  EXPECT_EQ(run_config(TrainOptions{}).count("examples_per_process"), 0u);  // old checkpoints resume
  // A bf16 run's checkpoint says so, and an f32 run records nothing new (old checkpoints resume).
  EXPECT_EQ(run_config(parse({"--compute-dtype", "bf16"}).options).at("compute_dtype"), "bf16");
  EXPECT_EQ(run_config(TrainOptions{}).count("compute_dtype"), 0u);
}

}  // namespace
}  // namespace fjit::examples
