// The step deadline outside while_loops (core/compile/executable.h, Executable::deadline_site):
// a long kernel that polls stops at the deadline, the rest of the step runs only its
// collectives, and every replica skips (or throws) the same step with its state unchanged.
// A deadline that is not reached changes no bit. A while_loop whose body holds a collective
// stops at the same iteration on every replica. Oracles: the same step without a deadline,
// and the state before the step.
#include <gtest/gtest.h>

#include <string>

#include "core/compile/kernel_sleep_testing.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

JitOptions deadline(CheckPolicy policy, double timeout_s) {
  JitOptions o;
  o.name = "deadline_step";
  o.checks = CheckMode::user;
  o.policy = policy;
  o.step_timeout_s = timeout_s;
  return o;
}

// One SGD-like step: w - 0.1 * mean over replicas of x^T (x w). kMatMulLine: the first matmul.
constexpr int kMatMulLine = __LINE__ + 2;
TensorDict sgd(const Params& p, const Tensor& x, const char* axis) {
  const Tensor y = matmul(x, p["w"]);
  Tensor g = matmul(transpose(x), y);
  if (axis) g = pmean(g, axis);
  TensorDict next;
  next.set("w", p["w"] - 0.1 * g);
  return next;
}

ArrayDict weights() {
  ArrayDict w;
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1.0f;
  w.set("w", Array::from_vector(std::move(v), {3, 4}));
  return w;
}

TEST(StepDeadline, ALongKernelThatPollsStopsAtTheDeadlineAndSkipStepKeepsTheState) {
  auto f = jit([](const Params& p, const Tensor& x) { return sgd(p, x, nullptr); },
               deadline(CheckPolicy::skip_step, 0.2));
  const ArrayDict state = weights();
  const Array x = Array::full(DType::f32, {5, 3}, 0.5);
  ArrayDict out;
  EXPECT_FALSE(f.run_into(out, state, x).skipped);  // compiles; the deadline is far
  const ArrayDict before = testing::deep_copy(state);
  testing::sleep_in_kernel(0, Op::MatMul, 60.0);  // would last a minute without the deadline
  ArrayDict next;
  const StepResult r = f.run_into(next, state, x);
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(r.raised(CheckKind::step_timeout));
  testing::expect_bit_equal(next, before, "state after a timed-out step");
  // Under throw the report names the instruction and the user's call site.
  auto g = jit([](const Params& p, const Tensor& x) { return sgd(p, x, nullptr); },
               deadline(CheckPolicy::throw_error, 0.2));
  (void)g(state, x);
  testing::sleep_in_kernel(0, Op::MatMul, 60.0);
  const std::string what = error_of<CheckError>([&] { (void)g(state, x); });
  EXPECT_TRUE(has(what, "the step ran past its deadline of 0.2 s in matmul f32[5,4]")) << what;
  EXPECT_TRUE(has(what, "step_deadline_test.cc:" + std::to_string(kMatMulLine))) << what;
}

// A real long kernel, no seam: fjit's packed GEMM of 2*3000^3 flops, far longer than the
// deadline on any CPU, asks the deadline between units and stops; so does a long fused
// elementwise instruction. Both are named in the report.
TEST(StepDeadline, ThePackedGemmAndFusedElementwiseKernelsPollTheDeadline) {
  const PackedGemmUse saved = packed_gemm_use();
  set_packed_gemm_use(PackedGemmUse::always);  // BLIS, when used, does not poll
  const int64_t n = 3000;
  auto gemm = jit([](const Tensor& a, const Tensor& b) { return matmul(a, b); },
                  deadline(CheckPolicy::throw_error, 0.02));
  const Array a = Array::full(DType::f32, {n, n}, 0.5), b = Array::full(DType::f32, {n, n}, 0.25);
  std::string what = error_of<CheckError>([&] { (void)gemm(a, b); });
  set_packed_gemm_use(saved);
  EXPECT_TRUE(has(what, "the step ran past its deadline of 0.02 s in matmul f32[3000,3000] (instruction 0")) << what;
  // 64 fused elementwise passes over 64 Mi elements.
  auto chain = jit([](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 64; ++i) y = tanh(y * 1.0001 + 0.5);
    return y;
  }, deadline(CheckPolicy::throw_error, 0.02));
  what = error_of<CheckError>([&] { (void)chain(Array::full(DType::f32, {int64_t{1} << 26}, 0.5)); });
  EXPECT_TRUE(has(what, "the step ran past its deadline of 0.02 s in ")) << what;
  EXPECT_TRUE(has(what, "(instruction 0 of the plan")) << what;
}

TEST(StepDeadline, ADeadlineThatIsNotReachedChangesNoBit) {
  const ArrayDict state = weights();
  Array x = Array::full(DType::f32, {10, 3}, 0.5);
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
  auto run = [&](double timeout_s) {
    Mesh mesh = Mesh::threads(2);
    PmapOptions o;
    o.jit = deadline(CheckPolicy::throw_error, timeout_s);
    o.jit.num_replicas = 2;
    auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& xs) { return sgd(p, xs, "batch"); }, o);
    return step(mesh.replicate(state), x);
  };
  testing::expect_bit_equal(run(600.0), run(0.0), "a step under a far deadline");
}

// Thread replicas: replica 1 sits in a long kernel before the pmean while replica 0 waits in
// the pmean. Replica 1's kernel stops at its deadline, the pmean still pairs them, and both
// skip the step with their state unchanged; the next step runs as without the deadline.
TEST(StepDeadline, OnThreadReplicasADeadlineHitAroundACollectiveSkipsTheStepOnEveryReplica) {
  for (int replicas : {2, 3}) {
    Mesh mesh = Mesh::threads(replicas);
    PmapOptions o;
    o.jit = deadline(CheckPolicy::skip_step, 0.3);
    o.jit.num_replicas = replicas;
    auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& xs) { return sgd(p, xs, "batch"); }, o);
    const ArrayDict state = mesh.replicate(weights());
    const Array x = Array::full(DType::f32, {replicas * 5, 3}, 0.5);
    const ArrayDict good = step(state, x);
    const ArrayDict before = testing::deep_copy(state);
    testing::sleep_in_kernel(1, Op::MatMul, 60.0);
    ArrayDict next;
    const StepResult r = step.run_into(next, state, x);
    EXPECT_TRUE(r.skipped) << replicas;
    EXPECT_TRUE(r.raised(CheckKind::step_timeout)) << replicas;
    testing::expect_bit_equal(next, before, "state after a timed-out step");
    testing::expect_bit_equal(step(state, x), good, "the step after");
  }
}

// A while_loop whose condition never turns false holds a pmean in its body (its condition reads
// the pmean's result, so every replica agrees on it). Replica 1 is slow in one iteration, so
// the replicas' clocks pass their deadlines at different iterations; they still stop at the
// same one, and every replica throws the same report.
TEST(StepDeadline, AWhileLoopWithACollectiveInItsBodyStopsTogetherOnEveryReplica) {
  for (int replicas : {2, 3}) {
    Mesh mesh = Mesh::threads(replicas);
    PmapOptions o;
    o.jit = deadline(CheckPolicy::throw_error, 0.3);
    o.jit.num_replicas = replicas;
    auto step = pmap(mesh, "batch", [](const Tensor& rate) {
      std::pair<Tensor, Tensor> init{full(DType::f32, {1}, 0.0), sum(rate)};
      auto [x, r] = while_loop([](const std::pair<Tensor, Tensor>& c) { return all(c.first < 4.0); },
                               [](const std::pair<Tensor, Tensor>& c) {
                                 return std::pair{c.first + pmean(c.second * 1.0, "batch"), c.second};
                               },
                               init);
      return pmean(x, "batch");
    }, o);
    Array good = Array::full(DType::f32, {replicas, 1}, 1.0);
    EXPECT_EQ(step(good).data<float>()[0], 4.0f);
    const Array never = Array::full(DType::f32, {replicas, 1}, 0.0);  // rate 0: never ends
    testing::sleep_in_kernel(1, Op::AllReduce, 0.1);
    const std::string what = error_of<CheckError>([&] { step(never); });
    EXPECT_TRUE(has(what, "while_loop stopped: the step ran past its deadline of 0.3 s")) << what;
    EXPECT_TRUE(has(what, "at step 1:")) << what;
    EXPECT_EQ(step(good).data<float>()[0], 4.0f);  // the mesh goes on
  }
}

}  // namespace
}  // namespace fjit
