// The loss and the embedding at vocabulary scale: softmax_cross_entropy (the fused op
// softmax_xent) against a host loop in f64 and against the composition it replaced, its bits
// with 1, 2 and 3 intra-op threads, and the embedding's gradient (gather's VJP, scatter_add)
// with repeated ids: the same bits on any thread count, equal to a host loop.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f32;
using testing::random_f64;

Array labels_in(int64_t n, int64_t v, uint64_t seed) {
  Array a(DType::i32, {n});
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < n; ++i) a.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform() * v);
  return a;
}

// Runs f with 1, 2 and 3 intra-op threads and expects the same bits from each.
template <class F>
void expect_same_bits_on_1_2_3_threads(F&& f, const char* what) {
  const int saved = intra_op_threads();
  set_intra_op_threads(1);
  const ArrayDict one = f();
  for (int threads : {2, 3}) {
    set_intra_op_threads(threads);
    const ArrayDict other = f();
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(one.value(i).bit_equal(other.value(i))) << what << " " << one.name(i) << " on " << threads << " threads";
  }
  set_intra_op_threads(saved);
}

TEST(NnVocab, CrossEntropyAndItsGradientMatchTheHostLoopAndTheComposition) {
  const int64_t n = 37, v = 1300;  // several streaming chunks per row
  Array logits = random_f64({n, v}, 1);
  for (int64_t i = 0; i < logits.size(); ++i) logits.data<double>()[i] *= 6;
  Array labels = labels_in(n, v, 2);
  labels.data<int32_t>()[5] = -1;  // an ignored row
  const Array w = random_f64({n}, 3);
  auto loss = [](const Tensor& x, const Tensor& labels, const Tensor& w) {
    return sum(softmax_cross_entropy(x, labels) * w);
  };
  auto composed = [](const Tensor& x, const Tensor& labels, const Tensor& w) {
    Tensor picked = sum(log_softmax(x) * one_hot(labels, x.dim(1), x.dtype()), {-1});
    return sum(-picked * w);
  };
  auto vg = jit([&](const Tensor& x, const Tensor& l, const Tensor& w) {
    return std::tuple{softmax_cross_entropy(x, l), grad([&](const Tensor& x) { return loss(x, l, w); })(x),
                      grad([&](const Tensor& x) { return composed(x, l, w); })(x)};
  });
  auto [per_row, g, g_composed] = vg(logits, labels, w);
  for (int64_t r = 0; r < n; ++r) {
    const double* x = logits.data<double>() + r * v;
    const int32_t k = labels.data<int32_t>()[r];
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, x[j]);
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[j] - m);
    const bool in_range = k >= 0 && k < v;
    EXPECT_NEAR(per_row.data<double>()[r], in_range ? m + std::log(s) - x[k] : 0.0, 1e-12) << r;
    for (int64_t j = 0; j < v; ++j) {
      const double want = in_range ? (std::exp(x[j] - m) / s - (j == k)) * w.data<double>()[r] : 0.0;
      ASSERT_NEAR(g.data<double>()[r * v + j], want, 1e-14) << r << ", " << j;
      ASSERT_NEAR(g.data<double>()[r * v + j], g_composed.data<double>()[r * v + j], 1e-14) << r << ", " << j;
    }
  }
}

TEST(NnVocab, CrossEntropyBitsDoNotDependOnTheThreadCount) {
  const int64_t n = 700, v = 600;  // above the kernel's threshold for splitting rows
  const Array logits = random_f32({n, v}, 4), labels = labels_in(n, v, 5), w = random_f32({n}, 6);
  auto f = jit([](const Tensor& x, const Tensor& l, const Tensor& w) {
    return std::tuple{softmax_cross_entropy(x, l),
                      grad([&](const Tensor& x) { return sum(softmax_cross_entropy(x, l) * w); })(x)};
  });
  expect_same_bits_on_1_2_3_threads([&] {
    auto [loss, g] = f(logits, labels, w);
    return ArrayDict{{"loss", loss}, {"grad", g}};
  }, "softmax_cross_entropy");
}

TEST(NnVocab, EmbeddingGradientWithRepeatedIdsIsTheHostSumOnAnyThreadCount) {
  const int64_t vocab = 300, dim = 96, b = 16, t = 64;
  ArrayDict p;
  embedding_params(p, "tok", vocab, dim, 1, DType::f64);
  Array ids(DType::i32, {b, t});
  SplitMix64 rng(7);
  for (int64_t i = 0; i < ids.size(); ++i)  // a few hot ids, repeated many times
    ids.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform() < 0.5 ? rng.uniform() * 4 : rng.uniform() * vocab);
  const Array ct = random_f64({b, t, dim}, 8);
  auto g = jit(grad([](const Params& p, const Tensor& ids, const Tensor& ct) {
    return sum(embedding(p, "tok", ids) * ct);
  }));
  expect_same_bits_on_1_2_3_threads([&] { return g(p, ids, ct); }, "embedding gradient");
  const ArrayDict gt = g(p, ids, ct);
  std::vector<double> want(vocab * dim, 0.0);
  for (int64_t i = 0; i < b * t; ++i)
    for (int64_t c = 0; c < dim; ++c) want[ids.data<int32_t>()[i] * dim + c] += ct.data<double>()[i * dim + c];
  for (int64_t i = 0; i < vocab * dim; ++i) ASSERT_NEAR(gt["tok/table"].data<double>()[i], want[i], 1e-12) << i;
}

}  // namespace
}  // namespace fjit
