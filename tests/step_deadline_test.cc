// The step deadline outside while_loops (core/compile/executable.h, Executable::deadline_site):
// a long kernel that polls stops at the deadline, the rest of the step runs only its
// collectives, and every replica skips (or throws) the same step with its state unchanged.
// A deadline that is not reached changes no bit. A while_loop whose body holds a collective
// stops at the same iteration on every replica. Oracles: the same step without a deadline,
// and the state before the step.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <unistd.h>

#include "core/base/timeline.h"
#include "core/compile/kernel_sleep_testing.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/lib/optimizers.h"
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

// Each long kernel that polls between blocks: fused attention forward and backward, softmax
// cross-entropy and its gradient, full and row reductions, a batched product and a compiled
// fused loop (Adam's update). The seam makes the kernel start past the deadline without the executor having
// noticed it, so the kernel's own first ask must stop it: the count of kernel stops grows
// (it left its blocks undone), the report names that instruction, skip_step keeps the state,
// and the next step under a far deadline computes the bits of a step without one.
struct PollCase {
  const char* name;  // in the kernel's instruction's name in the plan
  std::function<TensorDict(const Params&, const Tensor&)> fn;
  Array x;
  ArrayDict state;  // besides "w"
};

// The poll cases' deadline: far for one step of each case, under the sanitizers too (the seam
// waits for it to pass, twice a case).
constexpr double kPollDeadline = 0.25;

// The first instruction of the plan computing `op`, or -1.
int first_instr(const Executable& exe, Op op) {
  for (size_t i = 0; i < exe.instrs.size(); ++i)
    if (exe.instrs[i].op == op) return static_cast<int>(i);
  return -1;
}

TEST(StepDeadline, AttentionSoftmaxReductionsAndCompiledLoopsStopAtTheirFirstPollPastTheDeadline) {
  const Array qkv = testing::random_f32({3, 2, 4, 128, 32}, 7);  // q, k, v of [B 2, H 4, T 128, d 32]
  const Array logits = testing::random_f32({512, 1001}, 8);
  const Array big = testing::random_f32({1 << 18}, 9);
  const Array rows = testing::random_f32({1024, 300}, 10);
  const Array batched = testing::random_f32({16, 96, 64}, 11);
  auto attend = [](const Tensor& qkv) {
    auto part = [&](int64_t i) {
      return reshape(slice(qkv, {i, 0, 0, 0, 0}, {i + 1, 2, 4, 128, 32}), {2, 4, 128, 32});
    };
    return dot_product_attention(part(0), part(1), part(2), /*causal=*/true);
  };
  auto attend_bf16 = [](const Tensor& qkv) {  // bf16 q, k, v: the bf16 kernel
    auto part = [&](int64_t i) {
      return cast(reshape(slice(qkv, {i, 0, 0, 0, 0}, {i + 1, 2, 4, 128, 32}), {2, 4, 128, 32}), DType::bf16);
    };
    return dot_product_attention(part(0), part(1), part(2), /*causal=*/true);
  };
  auto labels = [](const Tensor& logits) { return argmax(logits, 1); };
  const ArrayDict adam_state = Adam{}.init_state(ArrayDict{{"v", big}});
  const PollCase cases[] = {
      {"attention", [&](const Params& p, const Tensor& x) {
         TensorDict n;
         n.set("w", p["w"] + sum(attend(x)));
         return n;
       }, qkv, {}},
      {"attention_grad", [&](const Params& p, const Tensor& x) {
         auto [loss, g] = value_and_grad([&](const Tensor& y) { return sum(attend(y)); })(x);
         TensorDict n;
         n.set("w", p["w"] + sum(g));
         return n;
       }, qkv, {}},
      {"attention", [&](const Params& p, const Tensor& x) {  // bf16 q, k, v
         TensorDict n;
         n.set("w", p["w"] + sum(attend_bf16(x)));
         return n;
       }, qkv, {}},
      {"attention_grad", [&](const Params& p, const Tensor& x) {  // bf16 q, k, v
         auto [loss, g] = value_and_grad([&](const Tensor& y) { return sum(attend_bf16(y)); })(x);
         TensorDict n;
         n.set("w", p["w"] + sum(g));
         return n;
       }, qkv, {}},
      {"softmax_xent", [&](const Params& p, const Tensor& x) {
         TensorDict n;
         n.set("w", p["w"] + sum(softmax_xent(x, labels(x))));
         return n;
       }, logits, {}},
      {"softmax_xent_grad", [&](const Params& p, const Tensor& x) {
         auto [loss, g] = value_and_grad([&](const Tensor& y) { return sum(softmax_xent(y, labels(x))); })(x);
         TensorDict n;
         n.set("w", p["w"] + sum(g));
         return n;
       }, logits, {}},
      {"reduce_sum", [](const Params& p, const Tensor& x) {
         TensorDict n;
         n.set("w", p["w"] * sum(x));
         return n;
       }, big, {}},
      {"reduce_max", [](const Params& p, const Tensor& x) {
         TensorDict n;
         n.set("w", p["w"] * sum(max(x, {1})));
         return n;
       }, rows, {}},
      {"matmul", [](const Params& p, const Tensor& x) {  // batched: one product per entry
         TensorDict n;
         n.set("w", p["w"] + sum(matmul(x, x, false, true)));
         return n;
       }, batched, {}},
      {"matmul", [](const Params& p, const Tensor& x) {  // bf16 operands, f32 results
         const Tensor h = cast(x, DType::bf16);
         TensorDict n;
         n.set("w", p["w"] + sum(matmul(h, h, DType::f32, false, true)));
         return n;
       }, rows, {}},
      {"compiled: adam", [](const Params& p, const Tensor& x) {
         TensorDict params{{"v", p["v"]}}, grads{{"v", x}}, st;
         for (const auto& [k, v] : p)
           if (k != "w" && k != "v") st.set(k, v);
         auto [p2, s2] = Adam{}.update(params, grads, st);
         TensorDict n;
         for (const auto& [k, v] : p) n.set(k, k == "w" ? v * 1.0 : k == "v" ? p2["v"] : s2[k]);
         return n;
       }, big, adam_state},
  };
  for (const PollCase& c : cases) {
    SCOPED_TRACE(c.name);
    ArrayDict state;
    state.set("w", Array::full(DType::f32, {}, 1.0));
    if (!c.state.empty()) state.set("v", big);
    for (size_t i = 0; i < c.state.size(); ++i) state.set(c.state.name(i), c.state.value(i));
    auto skip = jit(c.fn, deadline(CheckPolicy::skip_step, kPollDeadline));
    ArrayDict good;
    ASSERT_FALSE(skip.run_into(good, state, c.x).skipped);  // compiles; the deadline is far
    const Executable& exe = *skip.core().last_entry()->exe;
    // The instruction of the kernel: its op's first in the plan.
    int at = -1;
    for (size_t i = 0; i < exe.instrs.size() && at < 0; ++i)
      if (has(std::string(exe.instrs[i].trace_name ? exe.instrs[i].trace_name : ""), c.name) ||
          has(exe.instrs[i].label, c.name))
        at = static_cast<int>(i);
    ASSERT_GE(at, 0) << exe.plan_string();
    const Op op = exe.instrs[static_cast<size_t>(at)].op;
    ASSERT_EQ(first_instr(exe, op), at) << exe.plan_string();
    const ArrayDict before = testing::deep_copy(state);
    const int64_t stops = kernel_deadline_stops();
    testing::start_past_deadline(0, op);
    ArrayDict next;
    const StepResult r = skip.run_into(next, state, c.x);
    EXPECT_GT(kernel_deadline_stops(), stops) << exe.plan_string();
    EXPECT_TRUE(r.skipped);
    EXPECT_TRUE(r.raised(CheckKind::step_timeout));
    testing::expect_bit_equal(next, before, "state after a timed-out step");
    // Under throw the report names the kernel's instruction.
    auto thrown = jit(c.fn, deadline(CheckPolicy::throw_error, kPollDeadline));
    (void)thrown(state, c.x);
    testing::start_past_deadline(0, op);
    const std::string what = error_of<CheckError>([&] { (void)thrown(state, c.x); });
    EXPECT_TRUE(has(what, fmt::format("(instruction {} of the plan", at))) << what << "\n" << exe.plan_string();
    // A deadline not reached changes no bit.
    auto plain = jit(c.fn, deadline(CheckPolicy::throw_error, 0.0));
    testing::expect_bit_equal(plain(state, c.x), good, "a step under a far deadline");
  }
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
// skip the step with their state unchanged; the next step runs as without the deadline. The
// same with the all-reduces overlapped on each replica's collective worker, and in the fpe
// check mode.
TEST(StepDeadline, OnThreadReplicasADeadlineHitAroundACollectiveSkipsTheStepOnEveryReplica) {
  struct Mode {
    int replicas;
    Overlap overlap;
    CheckMode checks;
  };
  for (const Mode m : {Mode{2, Overlap::off, CheckMode::user}, Mode{3, Overlap::off, CheckMode::user},
                       Mode{2, Overlap::worker, CheckMode::user}, Mode{3, Overlap::worker, CheckMode::fpe}}) {
    const int replicas = m.replicas;
    SCOPED_TRACE(fmt::format("{} replicas, overlap {}, checks {}", replicas, overlap_name(m.overlap),
                             static_cast<int>(m.checks)));
    Mesh mesh = Mesh::threads(replicas);
    PmapOptions o;
    o.jit = deadline(CheckPolicy::skip_step, 0.3);
    o.jit.num_replicas = replicas;
    o.jit.overlap = m.overlap;
    o.jit.checks = m.checks;
    auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& xs) { return sgd(p, xs, "batch"); }, o);
    const ArrayDict state = mesh.replicate(weights());
    const Array x = Array::full(DType::f32, {replicas * 5, 3}, 0.5);
    const ArrayDict good = step(state, x);
    const ArrayDict before = testing::deep_copy(state);
    testing::sleep_in_kernel(1, Op::MatMul, 60.0);
    ArrayDict next;
    const StepResult r = step.run_into(next, state, x);
    if (m.overlap == Overlap::worker && m.checks != CheckMode::fpe) {  // the pmean ran on the worker
      const Executable& exe = *step.jit_core().last_entry()->exe;
      EXPECT_GT(exe.num_overlapped, 0) << exe.plan_string();
    }
    EXPECT_TRUE(r.skipped);
    EXPECT_TRUE(r.raised(CheckKind::step_timeout));
    testing::expect_bit_equal(next, before, "state after a timed-out step");
    testing::expect_bit_equal(step(state, x), good, "the step after");
  }
}

// Under a deadline the timeline still records every instruction of every replica's step, with
// the all-reduces overlapped on the collective worker, and the bits are those of the step
// without a deadline, overlap or timeline.
TEST(StepDeadline, UnderADeadlineTheTimelineRecordsAndOverlappedStepsKeepTheirBits) {
  const ArrayDict state = weights();
  const Array x = testing::random_f32({10, 3}, 3);
  auto run = [&](double timeout_s, Overlap overlap) {
    Mesh mesh = Mesh::threads(2);
    PmapOptions o;
    o.jit = deadline(CheckPolicy::throw_error, timeout_s);
    o.jit.num_replicas = 2;
    o.jit.overlap = overlap;
    auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& xs) { return sgd(p, xs, "batch"); }, o);
    return step(mesh.replicate(state), x);
  };
  const ArrayDict plain = run(0.0, Overlap::off);
  const std::string path = ::testing::TempDir() + "/deadline_timeline_" + std::to_string(::getpid()) + ".json";
  timeline::start(path);
  const ArrayDict overlapped = run(600.0, Overlap::worker);
  ASSERT_TRUE(timeline::stop());
  testing::expect_bit_equal(overlapped, plain, "overlapped under a far deadline");
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  // Each replica's step records its instructions (three here) and its all-reduce.
  auto count = [&](const std::string& part) {
    int n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  };
  EXPECT_GE(count("\"cat\":\"op\""), 6) << text.substr(0, 3000);
  EXPECT_GE(count("\"cat\":\"collective\""), 2) << text.substr(0, 3000);
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
