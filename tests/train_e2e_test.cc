// End to end: the Fashion-MNIST trainer of examples/lib (the code the main job runs) on the
// committed 16-example fixture, with two thread replicas: the loss falls while replicas stay
// bitwise identical (divergence check every step), a resumed run reproduces the uninterrupted
// one bit for bit, a poisoned batch under skip_step leaves exactly the state of a run that never
// saw it, and the command-line parser rejects what it should.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "lib/idx_reader.h"
#include "lib/train_loop.h"

namespace fjit::examples {
namespace {

std::string data_dir() {
  const char* env = std::getenv("FJIT_TEST_DATA");
  return env ? env : std::string(FJIT_SOURCE_DIR) + "/tests/data";
}

const io::Dataset& fixture() {
  static const io::Dataset d = io::load_dataset(data_dir() + "/fmnist-16-images-idx3-ubyte.gz",
                                                 data_dir() + "/fmnist-16-labels-idx1-ubyte.gz");
  return d;
}

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

void expect_bit_equal(const ArrayDict& a, const ArrayDict& b, const char* what) {
  ASSERT_EQ(a.names(), b.names()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a.value(i).bit_equal(b.value(i))) << what << " '" << a.name(i) << "' differs";
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

  // A checkpoint of another model is refused with the first difference named.
  TrainOptions wide = small_options();
  wide.layers = {784, 64, 10};
  Trainer other(Mesh::threads(2), wide, fixture());
  try {
    other.load(io::checkpoint_path(o.checkpoint_dir, 6));
    ADD_FAILURE() << "loading a 784-512-256-10 checkpoint into a 784-64-10 model succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("params/w1"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

io::Batch poisoned(const io::Batch& b, int replica, int replicas, bool nan) {
  io::Batch out{b.images.clone(), b.labels.clone(), b.epoch, b.index};
  const int64_t row = Mesh::shard_range(out.images.shape()[0], replicas, replica).first;
  if (nan) out.images.data<float>()[row * 784 + 100] = NAN;
  else out.labels.data<int32_t>()[row] = -3;
  return out;
}

// Trains max_steps; at step `bad` (0-based) either trains on a poisoned batch or skips it.
void run_with_poison(Trainer& t, int64_t bad, bool poison, bool nan, std::vector<int64_t>* skipped) {
  while (std::optional<io::Batch> b = t.next_batch()) {
    const int64_t step = t.steps_done() - 1;
    if (step == bad && !poison) continue;
    StepStats s = step == bad ? t.train_on(poisoned(*b, 1, 2, nan)) : t.train_on(*b);
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
  std::optional<io::Batch> b = t.next_batch();
  ASSERT_TRUE(b.has_value());
  try {
    t.train_on(poisoned(*b, 1, 2, false));
    ADD_FAILURE() << "a label out of range passed the check";
  } catch (const CheckError& e) {
    const std::string report = e.what();
    EXPECT_NE(report.find("labels must be classes in [0, 10)"), std::string::npos) << report;
    EXPECT_NE(report.find("min -3"), std::string::npos) << report;
    EXPECT_NE(report.find("replica 1"), std::string::npos) << report;
    EXPECT_NE(report.find("mlp_model.cc"), std::string::npos) << report;
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
    io::load_fashion_mnist(data_dir() + "/no-such-dir", "train");
    FAIL() << "loading a missing file succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir"), std::string::npos) << e.what();
  }
}

ParsedOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
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
  EXPECT_FALSE(p.options.cosine_schedule);
  EXPECT_EQ(p.options.layers, (std::vector<int64_t>{784, 32, 10}));
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(TrainOptionsParser, RejectsBadInput) {
  EXPECT_NE(parse({"--epochs", "0"}).error.find("--epochs"), std::string::npos);
  EXPECT_NE(parse({"--lr", "fast"}).error.find("'fast'"), std::string::npos);
  EXPECT_NE(parse({"--checks", "some"}).error.find("off, user or all"), std::string::npos);
  EXPECT_NE(parse({"--on-check-failure", "retry"}).error.find("throw, skip_step or log"),
            std::string::npos);
  EXPECT_NE(parse({"--batch-size", "-4"}).error.find("--batch-size"), std::string::npos);
  EXPECT_NE(parse({"--seed", "-1"}).error.find("unsigned"), std::string::npos);
  EXPECT_NE(parse({"--replicas", "0"}).error.find("--replicas"), std::string::npos);
  EXPECT_NE(parse({"--bogus"}).error.find("unknown option"), std::string::npos);
  EXPECT_NE(parse({"--epochs"}).error.find("needs a value"), std::string::npos);
  EXPECT_NE(parse({"--resume"}).error.find("--checkpoint-dir"), std::string::npos);
  EXPECT_FALSE(parse({"--layers", "784"}).error.empty());
}

}  // namespace
}  // namespace fjit::examples
