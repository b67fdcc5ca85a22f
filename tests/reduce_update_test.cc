// The all-reduce update: Communicator::all_reduce_apply on the thread backend (every block
// applied once for every replica, with the rank-order sum), and the fused SGD step of pmap
// (psum then p - lr * g as one collective): against unfused evaluation, identical across
// check modes, and bitwise-equal replicas.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "fjit.h"
#include "parallel/pmap.h"
#include "parallel/shm_communicator.h"
#include "tests/communicator_testing.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

// What one replica's apply calls saw: the values at each position, and how often each came.
template <class T>
struct Seen {
  explicit Seen(int64_t n) : values(n), hits(n) {}
  std::vector<T> values;
  std::vector<std::atomic<int>> hits;
};

template <class T>
void record(void* ctx, int64_t begin, int64_t count, const void* values) {
  auto& s = *static_cast<Seen<T>*>(ctx);
  std::memcpy(s.values.data() + begin, values, count * sizeof(T));
  for (int64_t i = begin; i < begin + count; ++i) s.hits[i].fetch_add(1);
}

template <class T>
void check_apply(int n, int64_t count) {
  ShmGroup group(n, StallPolicy{});
  group.run([&](Communicator& c) {
    std::vector<T> src = testing::fill<T>(count, testing::order_sensitive<T>, c.rank());
    std::vector<T> scratch(count);
    Seen<T> seen(count);
    c.all_reduce_apply(src.data(), scratch.data(), count, dtype_of<T>::value, &seen, record<T>);
    int64_t wrong = 0, twice = 0;
    for (int64_t i = 0; i < count; ++i) {
      const T want = testing::rank_order_sum<T>(n, i);
      wrong += std::memcmp(&seen.values[i], &want, sizeof(T)) != 0;
      twice += seen.hits[i].load() != 1;
    }
    EXPECT_EQ(wrong, 0) << "n=" << n << " count=" << count << " rank " << c.rank();
    EXPECT_EQ(twice, 0) << "elements not applied exactly once, n=" << n << " rank " << c.rank();
    // The sources are read, never written.
    EXPECT_TRUE(src == testing::fill<T>(count, testing::order_sensitive<T>, c.rank()));
  });
}

TEST(AllReduceApply, EveryBlockOnceForEveryReplicaWithTheRankOrderSum) {
  for (int n : {1, 2, 3, 4})
    for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{5000}, int64_t{70001}}) {
      check_apply<float>(n, count);
      check_apply<double>(n, count);
    }
}

// A least-squares SGD step: w - lr * pmean(grad of mean((x w + b - y)^2)).
Tensor lsq_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor e = matmul(x, p["w"]) + p["b"] - y;
  Tensor loss = mean(e * e);
  check(isfinite(loss), "loss is {}", loss);
  return loss;
}

auto sgd_step(const Mesh& mesh, CheckMode mode) {
  PmapOptions o;
  o.jit.checks = mode;
  return pmap(mesh, "b", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(lsq_loss)(p, x, y);
    return std::tuple{sgd(p, pmean(g, "b"), 0.05), pmean(loss, "b")};
  }, o);
}

using testing::random_f32;

// Gradients reduced in their own shape (each at least the bucket size; smaller ones share a
// bucket, whose slices are updated unfused) take the fused update.
TEST(ReduceUpdate, PmapSgdIsOneCollectiveAndTheSameInEveryCheckMode) {
  setenv("FJIT_FUSION_BYTES", "1024", 1);  // read when a step is traced
  for (int n : {1, 2, 3}) {
    Mesh mesh = Mesh::threads(n);
    ArrayDict p0;
    p0.set("w", random_f32({40, 24}, 1));
    p0.set("b", random_f32({24}, 2));
    const Array x = random_f32({8 * n, 40}, 3), y = random_f32({8 * n, 24}, 4);
    std::vector<ArrayDict> finals;
    for (CheckMode mode : {CheckMode::off, CheckMode::user, CheckMode::all}) {
      auto step = sgd_step(mesh, mode);
      ArrayDict p = mesh.replicate(p0);
      for (int s = 0; s < 3; ++s) p = std::get<0>(step(p, x, y));
      const std::string plan = step.jit_core().last_entry()->exe->plan_string();
      int fused = 0;
      for (size_t at = plan.find("reduce_update["); at != std::string::npos; at = plan.find("reduce_update[", at + 1)) ++fused;
      EXPECT_EQ(fused, 2) << plan;  // w and b: the two do not fit one 1024-byte bucket
      finals.push_back(p);
    }
    for (size_t m = 1; m < finals.size(); ++m)
      for (size_t i = 0; i < finals[0].size(); ++i)
        EXPECT_TRUE(finals[m].value(i).bit_equal(finals[0].value(i)))
            << "n=" << n << " mode " << m << " " << finals[0].name(i);
    // Against the unfused plan (mul, then sub: two roundings instead of one).
    setenv("FJIT_FUSION", "0", 1);
    auto plain = sgd_step(mesh, CheckMode::off);
    ArrayDict q = mesh.replicate(p0);
    for (int s = 0; s < 3; ++s) q = std::get<0>(plain(q, x, y));
    unsetenv("FJIT_FUSION");
    EXPECT_EQ(plain.jit_core().last_entry()->exe->plan_string().find("reduce_update["), std::string::npos);
    for (size_t i = 0; i < q.size(); ++i)
      for (int64_t k = 0; k < q.value(i).size(); ++k)
        ASSERT_NEAR(q.value(i).data<float>()[k], finals[0].value(i).data<float>()[k], 1e-5)
            << "n=" << n << " " << q.name(i) << "[" << k << "]";
  }
  unsetenv("FJIT_FUSION_BYTES");
}

}  // namespace
}  // namespace fjit
