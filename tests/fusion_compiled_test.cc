// Compiled fused programs (core/kernels/fused/fused_compiled.h) and the op-by-op fused pass that
// runs every other program. Oracle: the same graph compiled without fusion, bit for bit, on
// sizes that are not multiples of a vector, a range or a block, on one thread and on two.
// The compiled programs are recorded from the optimizers' declarations
// (core/lib/optimizer_compiled.h) and matched as DAGs, whatever the order of the steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "core/base/threads.h"
#include "core/lib/optimizer_compiled.h"
#include "core/lib/optimizers.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

void expect_bit_equal(const std::vector<Array>& a, const std::vector<Array>& b, const Executable& exe) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(a[k].bit_equal(b[k])) << "output " << k << "\n" << exe.plan_string();
}

// The fused plan's outputs with 1 and with 2 intra-op threads, each equal to the unfused
// plan's.
void expect_matches_unfused(const Graph& g, const std::vector<Array>& ins) {
  Compiled c = compile_both(g);
  const int saved = intra_op_threads();
  const auto plain = run(*c.plain, ins);
  for (int threads : {1, 2}) {
    set_intra_op_threads(threads);
    expect_bit_equal(run(*c.fused, ins), plain, *c.fused);
  }
  set_intra_op_threads(saved);
}

// An optimizer update of one parameter "w", with the compiled program it must run.
struct Update {
  const char* compiled;  // the plan's "[compiled: ...]" name
  std::function<OptimizerUpdate(const TensorDict&, const TensorDict&, const TensorDict&)> fn;
  bool moments = true;   // state m, v and step (the Adam family), else the momentum buffer m
  bool norm = false;     // the step also returns the gradients' global norm (sharing g*g)
};

std::vector<Update> updates() {
  return {
      {"adam", [](auto& p, auto& g, auto& s) { return Adam{.lr = 3e-3}.update(p, g, s); }},
      {"adam", [](auto& p, auto& g, auto& s) { return AdamW{.lr = 3e-3, .weight_decay = 0}.update(p, g, s); }},
      {"adam_sq_operand", [](auto& p, auto& g, auto& s) { return Adam{.lr = 3e-3}.update(p, g, s); },
       true, true},
      {"adam_l2", [](auto& p, auto& g, auto& s) { return Adam{.lr = 3e-3, .weight_decay = 1e-4}.update(p, g, s); }},
      {"adamw", [](auto& p, auto& g, auto& s) { return AdamW{.lr = 3e-3}.update(p, g, s); }},
      {"adamw_sq_operand",
       [](auto& p, auto& g, auto& s) { return AdamW{.lr = 3e-3, .weight_decay = 1e-4}.update(p, g, s); },
       true, true},
      {"sgd_momentum", [](auto& p, auto& g, auto& s) { return SGD{.lr = 0.1, .momentum = 0.9}.update(p, g, s); },
       false},
      {"sgd_nesterov",
       [](auto& p, auto& g, auto& s) { return SGD{.lr = 0.1, .momentum = 0.9, .nesterov = true}.update(p, g, s); },
       false},
      {"sgd_momentum_l2",
       [](auto& p, auto& g, auto& s) { return SGD{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}.update(p, g, s); },
       false},
      {"sgd_nesterov_l2",
       [](auto& p, auto& g, auto& s) {
         return SGD{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4}.update(p, g, s);
       },
       false},
      {"lion", [](auto& p, auto& g, auto& s) { return Lion{.lr = 3e-4}.update(p, g, s); }, false},
      {"lion_wd", [](auto& p, auto& g, auto& s) { return Lion{.lr = 3e-4, .weight_decay = 0.1}.update(p, g, s); },
       false},
  };
}

// Whether some instruction of the plan runs the compiled program `name`.
bool runs_compiled(const Executable& exe, const std::string& name) {
  return exe.plan_string().find("][compiled: " + name + "]") != std::string::npos;
}

// Each update (a later step: moments not zero) on one parameter runs its compiled program,
// bit-identical to the unfused plan.
TEST(CompiledFusion, OptimizerUpdatesRunCompiledAndMatchUnfusedOnAnySize) {
  std::mt19937 rng(11);
  for (const Update& u : updates())
    for (DType t : {DType::f32, DType::f64})
      for (const Shape& s : std::vector<Shape>{{1}, {15}, {3, 17}, {37, 1100}, {1031, 1029}}) {
        TraceContext ctx{{}};
        TensorDict p, g, state;
        p.set("w", ctx.parameter(t, s, "p"));
        g.set("w", ctx.parameter(t, s, "g"));
        state.set("m.w", ctx.parameter(t, s, "m"));
        std::vector<Array> ins = {random_array(t, s, rng), random_array(t, s, rng), random_array(t, s, rng)};
        if (u.moments) {
          state.set("v.w", ctx.parameter(t, s, "v"));
          state.set("step", ctx.parameter(DType::i32, {}, "step"));
          ins.push_back(random_array(t, s, rng, 0.0, 1.0));
          ins.push_back(Array::scalar<int32_t>(6));
        }
        if (u.norm) ctx.graph.outputs.push_back(global_norm(g).id());
        auto [p2, s2] = u.fn(p, g, state);
        ctx.graph.outputs.push_back(p2.at("w").id());
        for (const auto& [name, x] : s2) ctx.graph.outputs.push_back(x.id());
        SCOPED_TRACE(::testing::Message() << u.compiled << " " << dtype_name(t) << " " << s.size()
                                        << "-d, " << ins[0].size());
        Compiled c = compile_both(ctx.graph);
        EXPECT_TRUE(runs_compiled(*c.fused, u.compiled)) << c.fused->plan_string();
        expect_matches_unfused(ctx.graph, ins);
      }
}

// Through jit, as a training step runs them: Adam, AdamW with a scheduled (traced) learning
// rate after a global-norm check as the examples' step does, and SGD with momentum.
TEST(CompiledFusion, JittedOptimizerStepsRunCompiledPrograms) {
  const ArrayDict p{{"w", Array::full(DType::f32, {33, 65}, 0.5)}, {"b", Array::full(DType::f32, {65}, 0.1)}};
  const ArrayDict g{{"w", Array::full(DType::f32, {33, 65}, 0.25)}, {"b", Array::full(DType::f32, {65}, 0.5)}};
  const Array lr = Array::scalar<float>(1e-3f);
  auto adam = jit([](const TensorDict& p, const TensorDict& g, const TensorDict& s) {
    auto [p2, s2] = Adam{}.update(p, g, s);
    return std::tuple{p2, s2};
  });
  auto adamw = jit([](const TensorDict& p, const TensorDict& g, const TensorDict& s, const Tensor& lr) {
    Tensor norm = global_norm(g);
    auto [p2, s2] = AdamW{.lr = lr, .weight_decay = 1e-4}.update(p, g, s);
    return std::tuple{p2, s2, norm};
  });
  auto momentum = jit([](const TensorDict& p, const TensorDict& g, const TensorDict& s) {
    auto [p2, s2] = SGD{.lr = 0.1, .momentum = 0.9}.update(p, g, s);
    return std::tuple{p2, s2};
  });
  adam(p, g, Adam{}.init_state(p));
  adamw(p, g, AdamW{}.init_state(p), lr);
  momentum(p, g, SGD{.momentum = 0.9}.init_state(p));
  const std::string plans[] = {adam.core().last_entry()->exe->plan_string(),
                               adamw.core().last_entry()->exe->plan_string(),
                               momentum.core().last_entry()->exe->plan_string()};
  const char* names[] = {"adam", "adamw_sq_operand", "sgd_momentum"};
  for (int k = 0; k < 3; ++k) {
    // One compiled instruction per parameter.
    const std::string label = std::string("][compiled: ") + names[k] + "]";
    int count = 0;
    for (size_t at = plans[k].find(label); at != std::string::npos; at = plans[k].find(label, at + 1)) ++count;
    EXPECT_EQ(count, 2) << names[k] << "\n" << plans[k];
  }
}

// The same update as Adam's, written by hand in another order: the moments before the
// parameter's terms, the second moment first, and the operands of every add and mul but one
// swapped. It is the same DAG, so it runs Adam's compiled program, with the same bits.
TEST(CompiledFusion, AnUpdateInAnotherOrderRunsTheSameCompiledProgram) {
  compiled_optimizer_programs();  // no optimizer traced here: register the programs
  std::mt19937 rng(13);
  for (DType t : {DType::f32, DType::f64}) {
    const Shape s{37, 1100};
    TraceContext ctx{{}};
    Tensor p = ctx.parameter(t, s, "p"), g = ctx.parameter(t, s, "g");
    Tensor m = ctx.parameter(t, s, "m"), v = ctx.parameter(t, s, "v");
    Tensor step_size = ctx.parameter(t, {}, "step_size"), inv_sqrt_bc2 = ctx.parameter(t, {}, "c");
    Tensor v2 = (1.0 - 0.999) * (g * g) + 0.999 * v;
    Tensor m2 = (1.0 - 0.9) * g + 0.9 * m;
    Tensor p2 = p - (m2 / (1e-8 + inv_sqrt_bc2 * sqrt(v2))) * step_size;
    for (const Tensor& o : {v2, p2, m2}) ctx.graph.outputs.push_back(o.id());
    const std::vector<Array> ins = {random_array(t, s, rng), random_array(t, s, rng),
                                    random_array(t, s, rng), random_array(t, s, rng, 0.0, 1.0),
                                    random_array(t, {}, rng, 0.1, 1.0), random_array(t, {}, rng, 0.5, 2.0)};
    SCOPED_TRACE(dtype_name(t));
    Compiled c = compile_both(ctx.graph);
    EXPECT_TRUE(runs_compiled(*c.fused, "adam")) << c.fused->plan_string();
    expect_matches_unfused(ctx.graph, ins);
  }
}

// Two hyper-parameters of equal value are one constant node (hash-consing): b1 = 0.5 makes
// b1 and 1 - b1 the same operand, which both of the program's leaves read.
TEST(CompiledFusion, EqualHyperparametersShareAnOperandAndStillRunCompiled) {
  std::mt19937 rng(14);
  const Shape s{15, 33};
  TraceContext ctx{{}};
  TensorDict p, g, state;
  p.set("w", ctx.parameter(DType::f32, s, "p"));
  g.set("w", ctx.parameter(DType::f32, s, "g"));
  state.set("m.w", ctx.parameter(DType::f32, s, "m"));
  state.set("v.w", ctx.parameter(DType::f32, s, "v"));
  state.set("step", ctx.parameter(DType::i32, {}, "step"));
  auto [p2, s2] = Adam{.b1 = 0.5}.update(p, g, state);
  ctx.graph.outputs.push_back(p2.at("w").id());
  for (const auto& [name, x] : s2) ctx.graph.outputs.push_back(x.id());
  Compiled c = compile_both(ctx.graph);
  EXPECT_TRUE(runs_compiled(*c.fused, "adam")) << c.fused->plan_string();
  expect_matches_unfused(ctx.graph, {random_array(DType::f32, s, rng), random_array(DType::f32, s, rng),
                                     random_array(DType::f32, s, rng), random_array(DType::f32, s, rng, 0.0, 1.0),
                                     Array::scalar<int32_t>(3)});
}

// The programs come from the declarations: recording an optimizer's element gives the
// program the fusion planner emits for its traced update (the steps and results of the tables
// that were transcribed by hand before, and their operands, each constant once per use), and
// a declaration made up here gets one too.
using optimizer_compiled::Form;
using optimizer_compiled::record;
constexpr compiled::Program kAdamRecorded = record(Form<Adam>{"adam", {}}, 0);
constexpr compiled::Program kAdamSquareIn = record(Form<Adam>{"adam", {}}, 1);
constexpr compiled::Program kAdamWRecorded = record(Form<AdamW>{"adamw", {}}, 0);
constexpr compiled::Program kNesterovL2 =
    record(Form<SGD>{"sgd_nesterov_l2", {.momentum = 0.9, .nesterov = true, .weight_decay = 1}}, 0);
static_assert(kAdamRecorded.n == 13 && kAdamRecorded.k == 11 && kAdamRecorded.e == 3);
static_assert(kAdamSquareIn.n == 12 && kAdamSquareIn.k == 12 && kAdamSquareIn.e == 3);
static_assert(kAdamWRecorded.n == 14 && kAdamWRecorded.k == 12 && kAdamWRecorded.e == 3);
// momentum is read twice: two leaves here, one constant node (and operand) in the plan.
static_assert(kNesterovL2.n == 8 && kNesterovL2.k == 7 && kNesterovL2.e == 2);

// A declaration made up here: m <- m * 0.5 + g;  p <- p - lr * m.
struct HalfMomentum {
  static constexpr const char* kName = "HalfMomentum";
  Scalar lr = 0.1;
  constexpr StateLayout layout() const { return {.moments = 1}; }
  template <class V>
  constexpr void element(Element<V>& x) const {
    x.m = x.m * 0.5 + x.g;
    x.p = x.p - x.scalar(lr, x.dtype) * x.m;
  }
};
constexpr compiled::Program kHalf = record(Form<HalfMomentum>{"half", {}}, 0);
static_assert(kHalf.n == 4 && kHalf.k == 5 && kHalf.e == 2);
static_assert(kHalf.steps[0].op == Op::Mul && kHalf.steps[1].op == Op::Add &&
              kHalf.steps[2].op == Op::Mul && kHalf.steps[3].op == Op::Sub);
static_assert(kHalf.results[0] == 3 && kHalf.results[1] == 1);  // p, then m

TEST(CompiledFusion, EveryOptimizerFormIsRegisteredByName) {
  const std::vector<std::string> names = compiled_optimizer_programs();
  for (const Update& u : updates())
    EXPECT_NE(std::find(names.begin(), names.end(), u.compiled), names.end()) << u.compiled;
}

// A program no compiled table matches, so the block-by-block pass runs it: a row vector, a
// scalar, a column and further results, one of them read again by later steps.
TEST(CompiledFusion, BlockPassWithRowsScalarsAndFurtherResultsMatchesUnfused) {
  std::mt19937 rng(12);
  for (const Shape& s : std::vector<Shape>{{5, 7}, {37, 1100}, {700, 1531}}) {
    TraceContext ctx{{}};
    Tensor x = ctx.parameter(DType::f32, s, "x"), r = ctx.parameter(DType::f32, {s[1]}, "r");
    Tensor c = ctx.parameter(DType::f32, {s[0], 1}, "c"), k = ctx.parameter(DType::f32, {}, "k");
    Tensor a = x * k + r;           // further result
    Tensor b = sqrt(abs(a) + c);    // further result
    Tensor out = (b - a / c) * x;   // reads x again after a
    for (const Tensor& o : {out, a, b}) ctx.graph.outputs.push_back(o.id());
    const std::vector<Array> ins = {random_array(DType::f32, s, rng),
                                    random_array(DType::f32, {s[1]}, rng),
                                    random_array(DType::f32, {s[0], 1}, rng, 0.5, 2.0),
                                    random_array(DType::f32, {}, rng)};
    SCOPED_TRACE(::testing::Message() << s[0] << "x" << s[1]);
    expect_matches_unfused(ctx.graph, ins);
  }
}

}  // namespace
}  // namespace fjit
