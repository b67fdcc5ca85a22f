// Replay bundles and fjit::replay (checks/replay_bundle.h, checks/replay.h): a raising step
// writes one bundle per raising replica (and nothing with dumping off), the bundle holds the
// step's inputs bit for bit, it is bounded, and replay names the op that first went bad and
// the row of the element, with clear errors for a different function or a corrupt bundle.
// The oracle for "which op and which row" is the test's own poisoning: it puts a single bad
// value at a row it chooses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards; dumping points at it while the test runs.
class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("fjit_replay_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    set_check_dump_options({dir_, 8});
  }
  void TearDown() override {
    set_check_dump_options({});
    fs::remove_all(dir_);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (!fs::exists(dir_)) return names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

// x [8, 3] and p["w"] [3]: a log of each row's weighted values, summed per row; the loss check
// fails when any row went bad.
Tensor loss_of(const Params& p, const Tensor& x) {
  Tensor per_row = sum(log(x * p["w"]), {1});  // log: negative product -> NaN
  Tensor loss = mean(per_row);
  check(isfinite(loss), "loss {} is not finite", loss);
  return loss;
}

Array batch(int64_t rows, int64_t bad_row, float bad_value) {
  std::vector<float> v(static_cast<size_t>(rows * 3));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f + 0.25f * static_cast<float>(i % 7);
  if (bad_row >= 0) v[static_cast<size_t>(bad_row * 3 + 1)] = bad_value;
  return Array::from_vector(v, {rows, 3});
}

ArrayDict weights() {
  ArrayDict p;
  p.set("w", Array::from_vector(std::vector<float>{1.0f, 2.0f, 0.5f}));
  return p;
}

JitOptions throwing() {
  JitOptions o;
  o.checks = CheckMode::user;
  o.policy = CheckPolicy::throw_error;
  return o;
}

TEST_F(ReplayTest, DumpingOffWritesNothing) {
  set_check_dump_options({});
  EXPECT_FALSE(check_dump_enabled());
  auto f = jit(loss_of, throwing());
  EXPECT_THROW(f(weights(), batch(8, 5, -1.0f)), CheckError);
  EXPECT_TRUE(entries().empty());
}

TEST_F(ReplayTest, JitBundleHoldsTheStepAndReplayNamesTheOpAndRow) {
  auto f = jit(loss_of, throwing());
  const ArrayDict p = weights();
  const Array good = batch(8, -1, 0), bad = batch(8, 5, -1.0f);
  EXPECT_NO_THROW(f(p, good));  // step 0: nothing raised, nothing written
  EXPECT_TRUE(entries().empty());
  EXPECT_THROW(f(p, bad), CheckError);  // step 1
  ASSERT_EQ(entries(), std::vector<std::string>{"step1_replica0"});
  const std::string bundle = dir_ + "/step1_replica0";
  for (const char* file : {"inputs.safetensors", "meta.json", "report.txt"})
    EXPECT_TRUE(fs::exists(bundle + "/" + file)) << file;

  const ReplayBundle b = load_replay_bundle(bundle);
  EXPECT_EQ(b.step, 1);
  EXPECT_EQ(b.replica, 0);
  EXPECT_EQ(b.function, "fn");
  ASSERT_EQ(b.inputs.size(), 2u);
  EXPECT_EQ(b.inputs[0].first, "arg0.w");
  EXPECT_EQ(b.inputs[1].first, "arg1");
  EXPECT_TRUE(b.inputs[0].second.bit_equal(p["w"]));
  EXPECT_TRUE(b.inputs[1].second.bit_equal(bad));
  EXPECT_NE(b.report.find("loss nan is not finite"), std::string::npos) << b.report;

  const ReplayResult r = replay(bundle, loss_of);
  ASSERT_TRUE(r.found) << r.text;
  EXPECT_EQ(r.op, "log") << r.text;
  ASSERT_EQ(r.index.size(), 2u);
  EXPECT_EQ(r.index[0], 5) << "the poisoned row";
  EXPECT_EQ(r.index[1], 1);
  EXPECT_TRUE(r.bad_input.empty()) << "the inputs themselves are finite";
  EXPECT_FALSE(r.after_collective);
  EXPECT_NE(r.site.find("checks_replay_test.cc"), std::string::npos) << r.site;
  EXPECT_NE(r.text.find("(row 5)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("at [5, 1] (row 5): -2"), std::string::npos) << "the operand x * w at the element\n" << r.text;
  EXPECT_NE(r.check_report.find("NaN in log"), std::string::npos) << "automatic checks on\n" << r.check_report;
}

TEST_F(ReplayTest, NonFiniteInputIsNamedWithItsRowAndFirstReader) {
  auto f = jit(loss_of, throwing());
  EXPECT_THROW(f(weights(), batch(8, 6, std::numeric_limits<float>::quiet_NaN())), CheckError);
  const ReplayResult r = replay(dir_ + "/step0_replica0", loss_of);
  EXPECT_EQ(r.bad_input, "arg1") << r.text;
  EXPECT_EQ(r.bad_input_index, (std::vector<int64_t>{6, 1})) << r.text;
  EXPECT_FALSE(r.found) << "every NaN after it comes from the input\n" << r.text;
  EXPECT_NE(r.bad_input_note.find("first read by mul"), std::string::npos) << r.text;
}

// Two thread replicas under pmap; rows 4..7 go to replica 1, whose shard row 2 is poisoned.
TEST_F(ReplayTest, PmapWritesABundlePerRaisingReplicaAndReplaysIt) {
  Mesh mesh = Mesh::threads(2);
  auto step_fn = [](const Params& p, const Tensor& x) {
    Tensor loss = loss_of(p, x);
    return std::tuple{pmean(loss, "batch")};
  };
  PmapOptions o;
  o.jit.checks = CheckMode::user;
  o.jit.policy = CheckPolicy::skip_step;
  auto step = pmap(mesh, "batch", step_fn, o);
  const ArrayDict p = mesh.replicate(weights());
  step(p, batch(8, 6, -3.0f));
  ASSERT_EQ(entries(), (std::vector<std::string>{"step0_replica0", "step0_replica1"})) << "every replica's part";
  EXPECT_FALSE(load_replay_bundle(dir_ + "/step0_replica0").raised);
  EXPECT_TRUE(load_replay_bundle(dir_ + "/step0_replica1").raised);
  const ReplayResult r = replay(dir_ + "/step0_replica1", step.function());
  ASSERT_TRUE(r.found) << r.text;
  EXPECT_EQ(r.op, "log");
  EXPECT_EQ(r.replica, 1);
  EXPECT_EQ(r.replicas_replayed, 2);
  EXPECT_EQ(r.index, (std::vector<int64_t>{2, 1})) << "row 6 of the batch is row 2 of replica 1's shard\n" << r.text;
  EXPECT_EQ(r.bundle.num_replicas, 2);
  EXPECT_EQ(r.bundle.axis_names, std::vector<std::string>{"batch"});
}

// Three thread replicas; only replica 1's shard (rows 4..7 of 12) holds a negative value, so
// its log makes a NaN that reaches replicas 0 and 2 through the psum. The oracle: the test
// put the value there.
TEST_F(ReplayTest, ANanFromReplicaOneThroughAPsumIsTracedToReplicaOne) {
  Mesh mesh = Mesh::threads(3);
  auto step_fn = [](const Params& p, const Tensor& x) {
    Tensor local = sum(log(x * p["w"]));
    Tensor total = psum(local, "batch");
    check(isfinite(total), "total {} is not finite", total);
    return std::tuple{total, local};
  };
  PmapOptions o;
  o.jit.checks = CheckMode::user;
  o.jit.policy = CheckPolicy::log;
  auto step = pmap(mesh, "batch", step_fn, o);
  const ArrayDict p = mesh.replicate(weights());
  step(p, batch(12, 6, -3.0f));  // row 6: replica 1's row 2
  ASSERT_EQ(entries(), (std::vector<std::string>{"step0_replica0", "step0_replica1", "step0_replica2"}));
  const ReplayBundle b0 = load_replay_bundle(dir_ + "/step0_replica0");
  ASSERT_EQ(b0.outputs.size(), 2u);
  EXPECT_TRUE(std::isnan(b0.outputs[0].second.item<float>())) << "replica 0 recorded the psum's NaN";
  EXPECT_TRUE(std::isfinite(b0.outputs[1].second.item<float>())) << "its own data is fine";

  const ReplayResult r = replay(dir_ + "/step0_replica0", step.function());  // any part will do
  std::printf("%s", r.text.c_str());
  EXPECT_EQ(r.replicas_replayed, 3) << r.text;
  EXPECT_TRUE(r.outputs_compared);
  EXPECT_TRUE(r.output_mismatches.empty()) << r.text;
  ASSERT_TRUE(r.found) << r.text;
  EXPECT_EQ(r.op, "log") << r.text;
  EXPECT_EQ(r.replica, 1) << r.text;
  EXPECT_EQ(r.index, (std::vector<int64_t>{2, 1})) << r.text;
  EXPECT_NE(r.text.find("all 3 replicas together"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("first bad op in plan order: log f32[4,3]"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find(", on replica 1\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("bit-identical"), std::string::npos) << r.text;

  // Replica 0's part alone: its collective gives its own value and nothing goes bad.
  fs::remove_all(dir_ + "/step0_replica1");
  const ReplayResult alone = replay(dir_ + "/step0_replica0", step.function());
  EXPECT_EQ(alone.replicas_replayed, 1);
  EXPECT_FALSE(alone.found) << alone.text;
  EXPECT_NE(alone.text.find("replica 0 of 3 alone"), std::string::npos) << alone.text;
}

// A scan over the rows: the body's log of row 5 makes the NaN; the replay names the op in
// the body and the iteration (the oracle: the row the test poisoned).
TEST_F(ReplayTest, ANanInsideAScanBodyNamesTheIteration) {
  auto fn = [](const Tensor& x) {
    auto [total, ys] = scan([](const Tensor& c, const Tensor& row) {
      Tensor v = sum(log(row));
      return std::pair{c + v, v};
    }, scalar(DType::f32, 0.0), x);
    check(isfinite(total), "total {} is not finite", total);
    return total;
  };
  auto f = jit(fn, throwing());
  EXPECT_THROW(f(batch(8, 5, -1.0f)), CheckError);
  const ReplayResult r = replay(dir_ + "/step0_replica0", fn);
  std::printf("%s", r.text.c_str());
  ASSERT_TRUE(r.found) << r.text;
  EXPECT_EQ(r.op, "log") << r.text;
  EXPECT_EQ(r.iteration, 5) << r.text;
  EXPECT_EQ(r.index, (std::vector<int64_t>{1})) << "element 1 of row 5\n" << r.text;
  EXPECT_NE(r.inside.find("iteration 5 of scan at"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("iteration 5 of scan"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("operand 0: operand 1 of the body f32[3]"), std::string::npos) << "the row, not input 1\n"
                                                                                   << r.text;
  EXPECT_TRUE(r.outputs_compared);
  EXPECT_TRUE(r.output_mismatches.empty()) << r.text;
}

// The same inside a fori_loop nested in a cond: the loops around the op are named.
TEST_F(ReplayTest, ANanInsideAForiLoopInACondNamesTheIteration) {
  auto fn = [](const Tensor& x) {
    Tensor out = cond(sum(x) > 0.0, [](const Tensor& v) {
      return fori_loop(0, 8, [&v](const Tensor& i, const Tensor& c) {
        return c + sum(sqrt(take(v, reshape(i, {1}), 0)));
      }, scalar(DType::f32, 0.0));
    }, [](const Tensor& v) { return sum(v); }, x);
    check(isfinite(out), "out {} is not finite", out);
    return out;
  };
  auto f = jit(fn, throwing());
  EXPECT_THROW(f(batch(8, 3, -4.0f)), CheckError);
  const ReplayResult r = replay(dir_ + "/step0_replica0", fn);
  ASSERT_TRUE(r.found) << r.text;
  EXPECT_EQ(r.op, "sqrt") << r.text;
  EXPECT_EQ(r.iteration, 3) << r.text;
  EXPECT_NE(r.inside.find("iteration 3 of fori_loop"), std::string::npos) << r.text;
  EXPECT_NE(r.inside.find("true branch of cond"), std::string::npos) << r.text;
}

// Bad data with every check on: the first reader named is the user's log, not the
// comparison the automatic domain check put in front of it.
TEST_F(ReplayTest, BadDataNamesTheUsersOpNotTheInsertedCheck) {
  auto fn = [](const Tensor& x) { return sum(log(x)); };
  JitOptions o = throwing();
  o.checks = CheckMode::all;
  auto f = jit(fn, o);
  EXPECT_THROW(f(batch(8, 6, std::numeric_limits<float>::quiet_NaN())), CheckError);
  const ReplayResult r = replay(dir_ + "/step0_replica0", fn);
  std::printf("%s", r.text.c_str());
  EXPECT_EQ(r.bad_input, "arg0") << r.text;
  EXPECT_NE(r.bad_input_note.find("first read by log f32[8,3]"), std::string::npos) << r.text;
  EXPECT_EQ(r.bad_input_note.find("first read by lt"), std::string::npos) << r.text;
}

TEST_F(ReplayTest, ADifferentFunctionIsAClearError) {
  auto f = jit(loss_of, throwing());
  EXPECT_THROW(f(weights(), batch(8, 5, -1.0f)), CheckError);
  auto other = [](const Params& p, const Tensor& x) {
    Tensor loss = mean(sum(log(x * p["w"] + 1.0), {1}));
    check(isfinite(loss), "loss {} is not finite", loss);
    return loss;
  };
  const std::string msg = testing::error_of([&] { replay(dir_ + "/step0_replica0", other); });
  EXPECT_NE(msg.find("different program"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fingerprint"), std::string::npos) << msg;
  auto wrong_kinds = [](const Tensor& w, const Tensor& x) { return sum(x * w); };
  const std::string kinds = testing::error_of([&] { replay(dir_ + "/step0_replica0", wrong_kinds); });
  EXPECT_NE(kinds.find("parameter 0 is a Tensor"), std::string::npos) << kinds;
}

TEST_F(ReplayTest, ACorruptBundleIsAnErrorNamingTheFile) {
  auto f = jit(loss_of, throwing());
  EXPECT_THROW(f(weights(), batch(8, 5, -1.0f)), CheckError);
  const std::string bundle = dir_ + "/step0_replica0";
  const std::string inputs = bundle + "/inputs.safetensors", meta = bundle + "/meta.json";
  fs::resize_file(inputs, fs::file_size(inputs) - 5);
  std::string msg = testing::error_of([&] { replay(bundle, loss_of); });
  EXPECT_EQ(msg.rfind(inputs, 0), 0u) << msg;
  std::ofstream(meta) << "{\"format\": \"fjit-replay-1\", \"step\": ";
  msg = testing::error_of([&] { replay(bundle, loss_of); });
  EXPECT_EQ(msg.rfind(meta + ": is not valid JSON", 0), 0u) << msg;
  fs::remove(meta);
  msg = testing::error_of([&] { replay(bundle, loss_of); });
  EXPECT_EQ(msg.rfind(meta, 0), 0u) << msg;
  msg = testing::error_of([&] { replay(dir_ + "/no_such_bundle", loss_of); });
  EXPECT_NE(msg.find("no_such_bundle"), std::string::npos) << msg;
}

TEST_F(ReplayTest, BundlesAreBoundedAndNeverHalfWritten) {
  set_check_dump_options({dir_, 2});
  JitOptions o = throwing();
  o.policy = CheckPolicy::log;
  auto f = jit(loss_of, o);
  for (int i = 0; i < 5; ++i) f(weights(), batch(8, i, -1.0f));
  EXPECT_EQ(entries(), (std::vector<std::string>{"step0_replica0", "step1_replica0"}))
      << "the first two, and no temporary directory left";
  EXPECT_TRUE(fs::exists(dir_ + "/step0_replica0/outputs.safetensors"));
}

TEST_F(ReplayTest, DonatedInputsSurviveARaisingStepWhileDumping) {
  JitOptions o = throwing();
  o.policy = CheckPolicy::log;
  o.donate_argnums = {0};
  auto f = jit([](const Params& p, const Tensor& x) {
    check(all(isfinite(x)), "x must be finite");
    TensorDict next;
    next.set("w", p["w"] * 2.0);
    return next;
  }, o);
  const ArrayDict p = weights();
  ArrayDict out = p;  // the outputs are the donated parameters (tests/donation_test.cc)
  const Array before = p["w"].clone();
  f.run_into(out, p, batch(8, 2, std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(p["w"].bit_equal(before)) << "not updated in place while dumping";
  const ReplayBundle b = load_replay_bundle(dir_ + "/step0_replica0");
  EXPECT_TRUE(b.inputs[0].second.bit_equal(before)) << "the step's input, not its output";
}

// A 2 x 2 grid under shard_map: x [4, 6] split over ("data", "model"), so element (3, 4) is
// element (1, 1) of replica 3 = (data 1, model 1). The bundle records the axis sizes, and the
// replay runs each psum over its own axis's group: the recorded outputs come back bit for bit
// (over all four replicas at once they would not).
TEST_F(ReplayTest, AShardMapStepReplaysWithItsMeshAxes) {
  Mesh mesh = Mesh::threads({{"data", 2}, {"model", 2}});
  auto step_fn = [](const Params& p, const Tensor& x) {
    Tensor local = sum(log(x * p["w"]));
    Tensor row = psum(local, "model");
    Tensor total = psum(row, "data");
    check(isfinite(total), "total {} is not finite", total);
    Tensor coord = cast(axis_index("model"), DType::f32);
    return std::tuple{total, reshape(row + coord, {1, 1})};
  };
  PmapOptions o;
  o.jit.checks = CheckMode::user;
  o.jit.policy = CheckPolicy::log;
  auto step = shard_map(step_fn, mesh, {ShardSpec::dict({{"w", {"model"}}}), {"data", "model"}},
                        {{}, {"data", "model"}}, o);
  ArrayDict p;
  p.set("w", Array::from_vector(std::vector<float>{1.0f, 2.0f, 0.5f, 1.5f, 0.25f, 3.0f}));
  Array x = Array::full(DType::f32, {4, 6}, 0.75);
  x.data<float>()[3 * 6 + 4] = -2.0f;
  step(p, x);
  ASSERT_EQ(entries().size(), 4u);
  const ReplayBundle b = load_replay_bundle(dir_ + "/step0_replica0");
  EXPECT_EQ(b.axis_names, (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(b.axis_sizes, (std::vector<int>{2, 2}));
  const ReplayResult r = replay(dir_ + "/step0_replica0", step_fn);
  EXPECT_EQ(r.replicas_replayed, 4) << r.text;
  EXPECT_TRUE(r.outputs_compared);
  EXPECT_TRUE(r.output_mismatches.empty()) << r.text;
  ASSERT_TRUE(r.found) << r.text;
  EXPECT_EQ(r.op, "log") << r.text;
  EXPECT_EQ(r.replica, 3) << r.text;
  EXPECT_EQ(r.index, (std::vector<int64_t>{1, 1})) << r.text;

  // Axis sizes that do not make the replica count: an error naming meta.json.
  const std::string meta = dir_ + "/step0_replica0/meta.json";
  std::string text;
  {
    std::ifstream in(meta);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t open = text.find('[', text.find("\"axis_sizes\""));
  ASSERT_NE(open, std::string::npos) << text;
  text.replace(open, text.find(']', open) - open + 1, "[2, 3]");
  std::ofstream(meta) << text;
  const std::string msg = testing::error_of([&] { replay(dir_ + "/step0_replica0", step_fn); });
  EXPECT_EQ(msg.rfind(meta + ": axis_sizes [2,3] do not fit", 0), 0u) << msg;
}

}  // namespace
}  // namespace fjit
