// Memory planning of whole training steps: the arena the plan asks for against the least any
// plan of the same instruction order could use (the peak of simultaneously live values), and
// what fusion saves. Deterministic figures of the compiled plan, not timings.
#include "core/compile/memory_plan.h"

#include <gtest/gtest.h>

#include "core/compile/compiler.h"
#include "parallel/fjit.h"
#include "core/lib/initializers.h"
#include "examples/lib/mlp_model.h"

namespace fjit {
namespace {

Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  return mean(softmax_cross_entropy(examples::mlp_logits(p, x), y));
}

std::shared_ptr<const Executable> train_step_plan(const std::vector<int64_t>& sizes,
                                                  int64_t batch) {
  auto step = jit(
      [](const Params& p, const Tensor& x, const Tensor& y) {
        auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
        return std::tuple{sgd(p, g, 0.01), loss};
      },
      JitOptions{.name = "train_step", .checks = CheckMode::off});
  ArrayDict p = mlp_params(sizes, 1);
  Array x = Array::full(DType::f32, {batch, sizes.front()}, 0.5);
  Array y = Array::full(DType::i32, {batch}, 1);
  step(p, x, y);
  return step.core().last_entry()->exe;
}

TEST(MemoryPlan, MlpTrainingStepsUseAtMost130PercentOfTheMinimalLiveSet) {
  for (auto [sizes, batch] : {std::pair{std::vector<int64_t>{784, 512, 512, 10}, int64_t{128}},
                              std::pair{std::vector<int64_t>{64, 128, 10}, int64_t{64}}}) {
    auto exe = train_step_plan(sizes, batch);
    ASSERT_GT(exe->min_live_bytes, 0u);
    EXPECT_GE(exe->arena_bytes, exe->min_live_bytes);
    EXPECT_LE(exe->arena_bytes * 10, exe->min_live_bytes * 13) << exe->plan_string();
  }
}

TEST(MemoryPlan, FusionShrinksTheLargeStepsArena) {
  auto fused = train_step_plan({784, 512, 512, 10}, 128);
  CompileOptions o;
  o.fusion = Fusion::off;
  auto plain = compile(*fused->graph, {}, o);
  // Unfused, the three weight gradients and lr times them are materialized.
  EXPECT_LT(fused->arena_bytes * 2, plain->arena_bytes) << fused->plan_string() << "\n"
                                                        << plain->plan_string();
  EXPECT_LT(fused->instrs.size(), plain->instrs.size());
}

// The planner against a hand-checked schedule: reuse after death, and in place over an
// operand that dies where the result is made.
TEST(MemoryPlan, ReusesDeadRangesAndRunsInPlace) {
  std::vector<PlannedValue> v(4);
  v[0] = {1000, 0, 1, {}};   // a: read by 1
  v[1] = {1000, 1, 2, {0}};  // b = f(a) in place over a
  v[2] = {512, 2, 3, {}};    // c: made while b is live
  v[3] = {1000, 3, 3, {}};   // d: b is dead by now
  MemoryPlan p = plan_memory(v);
  EXPECT_EQ(p.offset[1], p.offset[0]);
  EXPECT_NE(p.offset[2], p.offset[1]);
  EXPECT_EQ(p.min_live_bytes, 1024 + 512 + 1024 - 1024 + 0);  // b and c, then c and d
  EXPECT_LE(p.arena_bytes, 1024 + 512 + 1024);
}

}  // namespace
}  // namespace fjit
