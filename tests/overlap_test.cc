// Collectives overlapped with the backward pass (core/compile/schedule.h,
// core/compile/collective_worker.h): the plan reduces gradients before its backward ends, the
// values are those of the plan without overlap bit for bit (SGD's fused all-reduce update,
// bucketed pmeans, the example models with AdamW, uneven shards, every check mode), a raised
// check is reported as without overlap, and the worker hands task errors back.
// The MPI side is tests/mpi/pmap_mpi_test.cc (OverlapMatchesPlainPlan).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/compile/collective_worker.h"
#include "fjit.h"
#include "lib/trainer.h"
#include "parallel/pmap.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::expect_bit_equal;

using testing::random_f32;

// A three-layer tanh MLP's mean squared error; its check raises on a non-finite loss.
Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h = tanh(matmul(x, p["w1"]) + p["b1"]);
  h = tanh(matmul(h, p["w2"]) + p["b2"]);
  Tensor e = matmul(h, p["w3"]) + p["b3"] - y;
  Tensor loss = mean(e * e);
  check(isfinite(loss), "loss is {}", loss);
  return loss;
}

ArrayDict mlp_params() {
  ArrayDict p;
  p.set("w1", random_f32({48, 64}, 1));
  p.set("b1", random_f32({64}, 2));
  p.set("w2", random_f32({64, 64}, 3));
  p.set("b2", random_f32({64}, 4));
  p.set("w3", random_f32({64, 8}, 5));
  p.set("b3", random_f32({8}, 6));
  return p;
}

// SGD (each gradient reduced alone takes the fused all-reduce update) or momentum (plain
// all-reduces, the gradients then read by the update).
auto mlp_step(const Mesh& mesh, bool overlap, CheckMode mode, bool momentum) {
  PmapOptions o;
  o.jit.checks = mode;
  o.jit.overlap = overlap ? Overlap::worker : Overlap::off;
  return pmap(mesh, "b", [momentum](const Params& p, const Params& v, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    const TensorDict mean_g = pmean(g, "b");
    if (!momentum) return std::tuple{sgd(p, mean_g, 0.05), v, pmean(loss, "b")};
    TensorDict v2, p2;
    for (size_t i = 0; i < p.size(); ++i) {
      v2.set(p.name(i), v.value(i) * 0.9f + mean_g.value(i));
      p2.set(p.name(i), p.value(i) - v2.value(i) * 0.05f);
    }
    return std::tuple{p2, v2, pmean(loss, "b")};
  }, o);
}

// Index of the first (or last) line of `plan` holding `what`; -1: none.
int line_of(const std::string& plan, const std::string& what, bool last = false) {
  std::istringstream lines(plan);
  std::string line;
  int found = -1;
  for (int i = 0; std::getline(lines, line); ++i)
    if (line.find(what) != std::string::npos) {
      found = i;
      if (!last) break;
    }
  return found;
}

TEST(Overlap, PlanReducesTheLastLayersWhileTheFirstLayersBackwardRuns) {
  setenv("FJIT_FUSION_BYTES", "1024", 1);  // every weight gradient reduced alone
  Mesh mesh = Mesh::threads(2);
  for (bool momentum : {false, true}) {
    auto step = mlp_step(mesh, true, CheckMode::user, momentum);
    ArrayDict p = mesh.replicate(mlp_params()), v = mesh.replicate(mlp_params());
    step(p, v, random_f32({16, 48}, 7), random_f32({16, 8}, 8));
    const std::string plan = step.jit_core().last_entry()->exe->plan_string();
    const int overlapped = line_of(plan, "[overlapped #1]");
    ASSERT_GE(overlapped, 0) << plan;
    // The first layer's weight gradient is the last product of the backward pass.
    EXPECT_LT(overlapped, line_of(plan, "matmul", /*last=*/true)) << plan;
    EXPECT_NE(plan.find("end: waits for overlapped"), std::string::npos) << plan;
  }
  unsetenv("FJIT_FUSION_BYTES");
}

TEST(Overlap, ValuesAreThoseOfThePlainPlanBitForBit) {
  for (const char* bucket : {"1024", "1048576"}) {  // reduced alone, or packed in buckets
    setenv("FJIT_FUSION_BYTES", bucket, 1);
    for (int n : {1, 2, 3})
      for (bool momentum : {false, true})
        for (CheckMode mode : {CheckMode::off, CheckMode::user, CheckMode::all}) {
          Mesh mesh = Mesh::threads(n);
          std::vector<ArrayDict> params, velocity;
          std::vector<Array> losses;
          for (bool overlap : {false, true}) {
            auto step = mlp_step(mesh, overlap, mode, momentum);
            ArrayDict p = mesh.replicate(mlp_params()), v = mesh.replicate(mlp_params());
            Array loss;
            for (int s = 0; s < 3; ++s) {  // 8n + 1 rows: uneven shards
              auto out = step(p, v, random_f32({8 * n + 1, 48}, 10 + s), random_f32({8 * n + 1, 8}, 20 + s));
              p = std::get<0>(out);
              v = std::get<1>(out);
              loss = std::get<2>(out);
            }
            params.push_back(p);
            velocity.push_back(v);
            losses.push_back(loss);
          }
          const std::string what = std::string("bucket ") + bucket + " n=" + std::to_string(n) +
                                   (momentum ? " momentum" : " sgd") + " mode " + check_mode_name(mode);
          expect_bit_equal(params[0], params[1], what);
          expect_bit_equal(velocity[0], velocity[1], what);
          EXPECT_TRUE(losses[0].bit_equal(losses[1])) << what;
        }
  }
  unsetenv("FJIT_FUSION_BYTES");
}

TEST(Overlap, ARaisedCheckIsReportedAsWithoutOverlapAndTheNextStepRuns) {
  Mesh mesh = Mesh::threads(2);
  std::vector<std::string> reports;
  for (bool overlap : {false, true}) {
    auto step = mlp_step(mesh, overlap, CheckMode::user, false);
    ArrayDict p = mesh.replicate(mlp_params()), v = mesh.replicate(mlp_params());
    Array x = random_f32({16, 48}, 7);
    x.data<float>()[9 * 48] = std::nanf("");  // a row of replica 1's shard
    try {
      step(p, v, x, random_f32({16, 8}, 8));
      ADD_FAILURE() << "no check raised, overlap " << overlap;
    } catch (const CheckError& e) {
      reports.push_back(e.what());
    }
    auto out = step(p, v, random_f32({16, 48}, 7), random_f32({16, 8}, 8));
    EXPECT_TRUE(std::isfinite(std::get<2>(out).data<float>()[0]));
  }
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0], reports[1]);
  EXPECT_NE(reports[1].find("loss is"), std::string::npos) << reports[1];
}

// Collectives inside control flow (a scan whose body reduces, gradient accumulation whose
// loss is pmean'd inside its loop) keep their order with the overlapped all-reduces around
// them: no replica waits in a different collective, and the values are the plain plan's.
TEST(Overlap, CollectivesInsideLoopsKeepTheirOrder) {
  auto loss = [](const Params& q, const Tensor& a, const Tensor& b) {
    return pmean(mean(square(tanh(matmul(a, q["w1"])) * q["w2"] - b)), "r");
  };
  for (int n : {2, 3}) {
    Mesh mesh = Mesh::threads(n);
    const Array xs = random_f32({4 * n, 16}, 41), ys = random_f32({4 * n, 24}, 42);
    ArrayDict p0;
    p0.set("w1", random_f32({16, 24}, 43));
    p0.set("w2", random_f32({24}, 44));
    std::vector<ArrayDict> finals;
    for (Overlap mode : {Overlap::off, Overlap::schedule, Overlap::worker}) {
      PmapOptions o;
      o.jit.overlap = mode;
      auto step = pmap(mesh, "r", [&](const Params& q, const Tensor& a, const Tensor& b) {
        auto [l, g] = accumulate_gradients(loss, 2)(q, a, b);
        auto [c, rows] = scan([](const Tensor& c, const Tensor& r) {
          return std::pair{c + psum(r, "r"), pmax(sum(r), "r")};
        }, zeros_like(reshape(slice(a, {0, 0}, {1, 16}), {16})), a);
        TensorDict next = sgd(q, pmean(g, "r"), 0.1);
        return std::tuple{next, c, rows, l};
      }, o);
      ArrayDict p = mesh.replicate(p0);
      ArrayDict out;
      for (int s = 0; s < 3; ++s) {
        auto [next, c, rows, l] = step(p, xs, ys);
        p = next;
        out = p;
        out.set("c", c);
        out.set("rows", rows);
        out.set("loss", l);
      }
      finals.push_back(out);
    }
    expect_bit_equal(finals[0], finals[1], "schedule, n=" + std::to_string(n));
    expect_bit_equal(finals[0], finals[2], "worker, n=" + std::to_string(n));
  }
}

class OverlapModels : public ::testing::TestWithParam<const char*> {};

TEST_P(OverlapModels, TrainingStepsMatchThePlainPlanBitForBit) {
  training::TrainOptions o;
  o.model = GetParam();
  o.layers = {784, 64, 32, 10};
  o.batch_size = 12;
  o.dropout = o.model == "mlp" ? 0.0 : 0.1;
  o.seed = 3;
  o.log_every = 0;
  const Array images = random_f32({24, 784}, 31);
  Array labels(DType::i32, {24});
  for (int64_t i = 0; i < 24; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
  ArrayDict columns;
  columns.set("images", images);
  columns.set("labels", labels);
  const io::Dataset data(columns);
  for (int n : {2, 3}) {
    std::vector<ArrayDict> params, state;
    for (const char* overlap : {"0", "1"}) {
      setenv("FJIT_OVERLAP", overlap, 1);  // read when the trainer's pmap is made
      examples::Trainer t(Mesh::threads(n), o, data);
      unsetenv("FJIT_OVERLAP");
      for (int s = 0; s < 2; ++s) ASSERT_TRUE(t.step().has_value());
      params.push_back(t.params());
      state.push_back(t.optimizer_state());
    }
    const std::string what = o.model + " n=" + std::to_string(n);
    expect_bit_equal(params[0], params[1], what + " parameters");
    expect_bit_equal(state[0], state[1], what + " optimizer state");
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OverlapModels, ::testing::Values("mlp", "cnn", "vit"));

TEST(Overlap, EnvironmentIsReadStrictly) {
  setenv("FJIT_OVERLAP", "yes", 1);
  try {
    JitOptions{}.resolved();
    ADD_FAILURE() << "FJIT_OVERLAP=yes accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FJIT_OVERLAP"), std::string::npos) << e.what();
  }
  for (auto [text, mode] : {std::pair{"1", Overlap::worker}, {"worker", Overlap::worker},
                             {"schedule", Overlap::schedule}, {"0", Overlap::off}, {"", Overlap::off}}) {
    setenv("FJIT_OVERLAP", text, 1);
    EXPECT_EQ(JitOptions{}.resolved().overlap.value(), mode) << text;
  }
  unsetenv("FJIT_OVERLAP");
  EXPECT_EQ(JitOptions{}.resolved().overlap.value(), Overlap::off);
}

// The worker itself: submission order, waits, and a task's exception handed to the waiter.
int g_order[8];
int g_next = 0;
void record_task(const Instr& in, const Frame&) { g_order[g_next++] = static_cast<int>(in.p[0]); }
void failing_task(const Instr&, const Frame&) { throw std::runtime_error("collective failed"); }

TEST(CollectiveWorker, RunsInOrderAndHandsErrorsToTheWaiter) {
  CollectiveWorker worker(0);
  Instr tasks[4];
  for (int i = 0; i < 4; ++i) {
    tasks[i].fn = record_task;
    tasks[i].p[0] = i;
  }
  const Frame frame{nullptr, nullptr};
  for (int round = 0; round < 3; ++round) {
    g_next = 0;
    worker.begin(4);
    for (const Instr& t : tasks) worker.submit(t, frame, false);
    worker.wait(4);
    ASSERT_EQ(g_next, 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(g_order[i], i);
  }
  Instr bad;
  bad.fn = failing_task;
  g_next = 0;
  worker.begin(3);
  worker.submit(tasks[0], frame, false);
  worker.submit(bad, frame, false);
  worker.submit(tasks[1], frame, false);
  EXPECT_THROW(worker.wait(3), std::runtime_error);
  worker.drain();
  EXPECT_EQ(g_next, 2);  // the task behind the failed one still ran
  worker.begin(1);       // and the worker is usable again
  worker.submit(tasks[2], frame, false);
  worker.wait(1);
  EXPECT_EQ(g_next, 3);
}

}  // namespace
}  // namespace fjit
