// Fused attention on bf16 q, k, v (core/trace/attention.h, core/kernels/structural/
// attention_bf16.cc) against attention in double from the bf16-rounded q, k and v:
//  - the output and the gradients of q, k and v, with and without a causal mask and key
//    lengths, on the AVX512_BF16 path (where the CPU has it) and the widening path
//    (FJIT_ISA=avx2), each element within a bound derived from what the kernel rounds: the
//    probabilities P and dS to bf16 (relative 2^-9 each, and D = rowsum(dO * out) carries the
//    output's error), so the error of an element is a small multiple of 2^-9 times the sum of
//    the absolute values of its terms, which the reference computes beside each element;
//  - the results are f32 and the gradients reach the f32 inputs through their casts;
//  - the bits do not depend on the intra-op thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/base/isa.h"
#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using Vec = std::vector<double>;

using testing::bf16_round;

Vec rounded_values(const Array& a) {
  Vec v(a.size());
  for (int64_t i = 0; i < a.size(); ++i) v[i] = bf16_round(a.at_as_double(i));
  return v;
}

struct Case {
  int64_t b, h, tq, tk, dh, dv;
  bool causal;
  std::vector<int32_t> lengths;  // empty: none
};

// Each result element and the sum of the absolute values of its terms.
struct Expected {
  Vec out, out_abs, dq, dq_abs, dk, dk_abs, dv, dv_abs;
};

// Attention in double and the gradients of sum(out * w), from the definitions.
Expected reference(const Case& c, const Vec& q, const Vec& k, const Vec& v, const Vec& w) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dh));
  Expected e;
  e.out.assign(c.b * c.h * c.tq * c.dv, 0);
  e.out_abs = e.out;
  e.dq.assign(c.b * c.h * c.tq * c.dh, 0);
  e.dq_abs = e.dq;
  e.dk.assign(c.b * c.h * c.tk * c.dh, 0);
  e.dk_abs = e.dk;
  e.dv.assign(c.b * c.h * c.tk * c.dv, 0);
  e.dv_abs = e.dv;
  for (int64_t bh = 0; bh < c.b * c.h; ++bh) {
    const int64_t len = c.lengths.empty() ? c.tk : c.lengths[bh / c.h];
    auto Q = [&](int64_t i, int64_t x) { return q[(bh * c.tq + i) * c.dh + x]; };
    auto K = [&](int64_t j, int64_t x) { return k[(bh * c.tk + j) * c.dh + x]; };
    auto V = [&](int64_t j, int64_t x) { return v[(bh * c.tk + j) * c.dv + x]; };
    auto W = [&](int64_t i, int64_t x) { return w[(bh * c.tq + i) * c.dv + x]; };
    for (int64_t i = 0; i < c.tq; ++i) {
      const int64_t n = c.causal ? std::min(len, i + c.tk - c.tq + 1) : len;
      Vec p(n);
      double mx = -INFINITY, total = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < c.dh; ++x) dot += Q(i, x) * K(j, x);
        mx = std::max(mx, p[j] = dot * scale);
      }
      for (double& s : p) total += s = std::exp(s - mx);
      for (double& s : p) s /= total;
      const int64_t oi = (bh * c.tq + i) * c.dv;
      double d = 0, d_abs = 0;
      for (int64_t x = 0; x < c.dv; ++x) {
        for (int64_t j = 0; j < n; ++j) {
          e.out[oi + x] += p[j] * V(j, x);
          e.out_abs[oi + x] += p[j] * std::abs(V(j, x));
        }
        d += W(i, x) * e.out[oi + x];
        d_abs += std::abs(W(i, x)) * e.out_abs[oi + x];
      }
      for (int64_t j = 0; j < n; ++j) {
        double dp = 0, dp_abs = 0;
        for (int64_t x = 0; x < c.dv; ++x) {
          dp += W(i, x) * V(j, x);
          dp_abs += std::abs(W(i, x) * V(j, x));
          e.dv[(bh * c.tk + j) * c.dv + x] += p[j] * W(i, x);
          e.dv_abs[(bh * c.tk + j) * c.dv + x] += p[j] * std::abs(W(i, x));
        }
        const double ds = p[j] * (dp - d) * scale, ds_abs = p[j] * (dp_abs + d_abs) * scale;
        for (int64_t x = 0; x < c.dh; ++x) {
          e.dq[(bh * c.tq + i) * c.dh + x] += ds * K(j, x);
          e.dq_abs[(bh * c.tq + i) * c.dh + x] += ds_abs * std::abs(K(j, x));
          e.dk[(bh * c.tk + j) * c.dh + x] += ds * Q(i, x);
          e.dk_abs[(bh * c.tk + j) * c.dh + x] += ds_abs * std::abs(Q(i, x));
        }
      }
    }
  }
  return e;
}

// |got - want| <= 2^-7 * abs + 1e-6 for every element (2^-9 per rounding, with room for the
// few roundings an element's terms pass through and f32 sums).
void expect_within(const Array& got, const Vec& want, const Vec& abs, const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::f32) << what;
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
  int reported = 0;
  double worst = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got.at_as_double(i) - want[i]), bound = std::ldexp(abs[i], -7) + 1e-6;
    worst = std::max(worst, err / bound);
    if (!(err <= bound) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got.at_as_double(i) << " vs " << want[i] << " (bound " << bound << ")";
  }
  std::printf("%s: largest error / bound %.3f\n", what.c_str(), worst);
}

// The four results of one step: out, dq, dk, dv (gradients of sum(out * w) for f32 q, k, v).
std::vector<Array> run_case(const Case& c, const Array& q, const Array& k, const Array& v, const Array& w) {
  const bool has_len = !c.lengths.empty();
  const Array len = Array::from_vector<int32_t>(has_len ? c.lengths : std::vector<int32_t>{0});
  auto f = jit([c, has_len](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& len) {
    auto attend = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return dot_product_attention(cast(q, DType::bf16), cast(k, DType::bf16), cast(v, DType::bf16), c.causal,
                                   has_len ? len : Tensor());
    };
    auto [loss, g] = value_and_grad([&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return sum(attend(q, k, v) * w);
    }, argnums<0, 1, 2>)(q, k, v);
    return std::tuple{attend(q, k, v), std::get<0>(g), std::get<1>(g), std::get<2>(g)};
  });
  auto [o, gq, gk, gv] = f(q, k, v, w, len);
  return {o, gq, gk, gv};
}

void check_case(const Case& c) {
  const Array q = testing::random_f32({c.b, c.h, c.tq, c.dh}, 1), k = testing::random_f32({c.b, c.h, c.tk, c.dh}, 2);
  const Array v = testing::random_f32({c.b, c.h, c.tk, c.dv}, 3);
  // bf16 values for the output's cotangent, so that its rounding in the kernel is exact.
  const Vec wv = rounded_values(testing::random_f32({c.b, c.h, c.tq, c.dv}, 4));
  std::vector<float> wf(wv.begin(), wv.end());
  const Array w = Array::from_vector<float>(wf, {c.b, c.h, c.tq, c.dv});
  const Expected e = reference(c, rounded_values(q), rounded_values(k), rounded_values(v), wv);
  const Isa saved = active_isa();
  for (Isa isa : {Isa::avx512, Isa::avx2}) {
    set_isa_limit(isa);
    const std::string path = active_avx512_bf16() ? "bf16 tiles" : "widened";
    const auto r = run_case(c, q, k, v, w);
    expect_within(r[0], e.out, e.out_abs, "out, " + path);
    expect_within(r[1], e.dq, e.dq_abs, "dq, " + path);
    expect_within(r[2], e.dk, e.dk_abs, "dk, " + path);
    expect_within(r[3], e.dv, e.dv_abs, "dv, " + path);
  }
  set_isa_limit(saved);
}

// Two key blocks and a partial one (the running maximum across blocks), dh and dv not
// multiples of the tiles, odd depths (the kernel's pairs).
TEST(AttentionBf16, MatchesDoubleFromRoundedOperands) { check_case({2, 2, 80, 80, 24, 20, false, {}}); }
TEST(AttentionBf16, CausalMatchesDoubleFromRoundedOperands) { check_case({2, 2, 80, 80, 24, 20, true, {}}); }
TEST(AttentionBf16, CausalWithKeyLengthsAndOddSizes) { check_case({2, 1, 50, 131, 33, 17, true, {131, 90}}); }
TEST(AttentionBf16, WholeTilesAsInTheLanguageModel) { check_case({1, 2, 128, 128, 64, 64, true, {}}); }
// A longer causal sequence: five query blocks, the causal diagonal's blocks part-way.
TEST(AttentionBf16, LongSequencesInSeveralChunks) { check_case({1, 2, 300, 300, 32, 32, true, {}}); }

TEST(AttentionBf16, BitsDoNotDependOnTheThreadCount) {
  const Case c{2, 3, 130, 130, 32, 32, true, {}};
  const Array q = testing::random_f32({c.b, c.h, c.tq, c.dh}, 5), k = testing::random_f32({c.b, c.h, c.tk, c.dh}, 6);
  const Array v = testing::random_f32({c.b, c.h, c.tk, c.dv}, 7), w = testing::random_f32({c.b, c.h, c.tq, c.dv}, 8);
  const int saved = intra_op_threads();
  std::vector<std::vector<Array>> runs;
  for (int threads : {1, 2, 3}) {
    set_intra_op_threads(threads);
    runs.push_back(run_case(c, q, k, v, w));
  }
  set_intra_op_threads(saved);
  for (size_t t = 1; t < runs.size(); ++t)
    for (size_t i = 0; i < runs[0].size(); ++i)
      EXPECT_EQ(0, std::memcmp(runs[0][i].raw(), runs[t][i].raw(), runs[0][i].size() * sizeof(float)))
          << "result " << i << " with " << t + 1 << " threads";
}

// Forward mode through bf16 attention: the tangent is f32, and close to the f32 attention's
// tangent on the same (bf16-rounded) values; the two differ only through the primal's
// log-sum-exp, which the bf16 kernel computes from bf16 products.
TEST(AttentionBf16, ItsTangentIsTheF32AttentionsOnTheRoundedValues) {
  const Array q = testing::random_f32({1, 2, 24, 16}, 31), k = testing::random_f32({1, 2, 24, 16}, 32);
  const Array v = testing::random_f32({1, 2, 24, 16}, 33), tq = testing::random_f32({1, 2, 24, 16}, 34);
  const Array tk = testing::random_f32({1, 2, 24, 16}, 35), tv = testing::random_f32({1, 2, 24, 16}, 36);
  auto tangent = [&](bool bf16) {
    return jit([bf16](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dq, const Tensor& dk,
                      const Tensor& dv) {
      auto rounded = [](const Tensor& x) { return cast(cast(x, DType::bf16), DType::f32); };
      auto f = [bf16](const Tensor& a, const Tensor& b, const Tensor& c) {
        if (!bf16) return dot_product_attention(a, b, c, true);
        return dot_product_attention(cast(a, DType::bf16), cast(b, DType::bf16), cast(c, DType::bf16), true);
      };
      return std::get<1>(jvp(f, std::tuple{rounded(q), rounded(k), rounded(v)}, std::tuple{dq, dk, dv}));
    })(q, k, v, tq, tk, tv);
  };
  const Array low = tangent(true), high = tangent(false);
  ASSERT_EQ(low.dtype(), DType::f32);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < high.size(); ++i) {
    worst = std::max(worst, std::fabs(double{low.data<float>()[i]} - high.data<float>()[i]));
    scale = std::max(scale, std::fabs(double{high.data<float>()[i]}));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 2e-2 * scale);
}

TEST(AttentionBf16, MixedDtypesAreATraceError) {
  auto f = jit([](const Tensor& q, const Tensor& k) { return dot_product_attention(cast(q, DType::bf16), k, k, false); });
  const Array q = testing::random_f32({1, 1, 4, 8}, 1);
  EXPECT_THROW(f(q, q), TraceError);
}

}  // namespace
}  // namespace fjit
