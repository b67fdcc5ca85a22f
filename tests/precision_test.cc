// The mixed-precision policy (core/nn/precision.h) and bf16 matmul through the tracer:
//  - linear, conv2d and multi_head_attention traced under compute bf16 equal a host loop in
//    double over the bf16-rounded operands of each product (weights and the activations that
//    enter a product, attention's q, k, v and probabilities; biases, softmax and the rest in
//    double), to f32 accumulation error; and
//    differ from the f32 layer by more than that (the policy did round);
//  - the gradients of a bf16 product are f32 (master weights stay f32) and equal the products
//    of the bf16-rounded cotangent with the bf16 operands;
//  - a CNN and a ViT trained under --compute-dtype bf16 on two thread replicas keep f32
//    parameters and optimizer state, and give the same bits with 1 and 2 intra-op threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "lib/trainer.h"
#include "parallel/fjit.h"
#include "tests/nn_host_reference.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::Vec;

using testing::bf16_round;

Vec rounded(Vec v) {
  for (double& x : v) x = bf16_round(x);
  return v;
}

// y [n, out] = x [n, in] @ w [in, out] + b, in double.
Vec host_affine(const Vec& x, const Vec& w, const Vec& b, int64_t n, int64_t in, int64_t out) {
  Vec y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w[k * out + o];
      y[r * out + o] = acc + (b.empty() ? 0.0 : b[o]);
    }
  return y;
}

// Max |got - want| over the elements; sizes must match.
double max_error(const Array& got, const Vec& want) {
  EXPECT_EQ(got.size(), static_cast<int64_t>(want.size()));
  double e = 0;
  for (int64_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got.at_as_double(i) - want[i]));
  return e;
}

TEST(Precision, ScopeNestsAndRefusesOtherDtypes) {
  EXPECT_EQ(current_precision().compute, DType::f32);
  {
    PrecisionScope a({.compute = DType::bf16});
    EXPECT_EQ(current_precision().compute, DType::bf16);
    {
      PrecisionScope b({.compute = DType::f32});
      EXPECT_EQ(current_precision().compute, DType::f32);
    }
    EXPECT_EQ(current_precision().compute, DType::bf16);
  }
  EXPECT_EQ(current_precision().compute, DType::f32);
  EXPECT_THROW(PrecisionScope({.compute = DType::f16}), std::invalid_argument);
  DType t;
  EXPECT_TRUE(compute_dtype_from_name("bf16", &t));
  EXPECT_EQ(t, DType::bf16);
  EXPECT_FALSE(compute_dtype_from_name("f16", &t));
}

TEST(Precision, MatmulResultDtypes) {
  auto f = jit([](const Tensor& a, const Tensor& b) {
    const Tensor a16 = cast(a, DType::bf16), b16 = cast(b, DType::bf16);
    return std::tuple{matmul(a16, b16, DType::f32), matmul(a16, b16)};
  });
  const Array a = testing::random_f32({5, 7}, 1), b = testing::random_f32({7, 3}, 2);
  auto [wide, narrow] = f(a, b);
  EXPECT_EQ(wide.dtype(), DType::f32);
  EXPECT_EQ(narrow.dtype(), DType::bf16);  // the operands' dtype: the product rounded once
  const Vec want = host_affine(rounded(testing::values(a)), rounded(testing::values(b)), {}, 5, 7, 3);
  EXPECT_LT(max_error(wide, want), 1e-5);
  for (int64_t i = 0; i < narrow.size(); ++i)
    EXPECT_EQ(narrow.at_as_double(i), bf16_round(wide.at_as_double(i))) << i;
  EXPECT_THROW(jit([](const Tensor& x) { return matmul(x, x, DType::f64); })(testing::random_f32({3, 3}, 3)),
               TraceError);
}

TEST(Precision, LinearUnderBf16MatchesTheRoundedHostLoop) {
  const int64_t n = 24, in = 96, out = 40;
  ArrayDict p;
  linear_params(p, "l", in, out, 5);
  p.set("l/b", testing::random_f32({out}, 6));
  const Array x = testing::random_f32({n, in}, 7);
  auto bf16 = jit([](const Params& q, const Tensor& v) {
    PrecisionScope s({.compute = DType::bf16});
    return linear(q, "l", v);
  });
  const Array y = bf16(p, x);
  ASSERT_EQ(y.dtype(), DType::f32);
  const Vec xv = testing::values(x), wv = testing::values(p["l/w"]), bv = testing::values(p["l/b"]);
  EXPECT_LT(max_error(y, host_affine(rounded(xv), rounded(wv), bv, n, in, out)), 2e-5);
  EXPECT_GT(max_error(y, host_affine(xv, wv, bv, n, in, out)), 1e-3);  // it did round
}

// A slice of a bf16 value carries an f32 cotangent as a cast, reshape or transpose does: q, k
// and v sliced out of one bf16 tensor get the gradients (and tangents) of q, k and v cast after
// slicing, bit for bit, not zeros.
TEST(Precision, SlicesOfABf16ValueCarryItsGradient) {
  const Array qkv = testing::random_f32({3, 2, 2, 16, 8}, 21), ct = testing::random_f32({2, 2, 16, 8}, 22);
  auto attend = [](const Tensor& x, bool cast_first) {
    const Tensor y = cast_first ? cast(x, DType::bf16) : x;
    auto part = [&](int64_t i) {
      const Tensor s = reshape(slice(y, {i, 0, 0, 0, 0}, {i + 1, 2, 2, 16, 8}), {2, 2, 16, 8});
      return cast_first ? s : cast(s, DType::bf16);
    };
    return dot_product_attention(part(0), part(1), part(2), /*causal=*/true);
  };
  auto grads = [&](bool cast_first) {
    return jit([&](const Tensor& x, const Tensor& c) {
      return grad([&](const Tensor& y) { return sum(attend(y, cast_first) * c); })(x);
    })(qkv, ct);
  };
  const Array sliced_bf16 = grads(true), cast_after = grads(false);
  ASSERT_EQ(sliced_bf16.dtype(), DType::f32);
  EXPECT_GT(max_error(cast_after, Vec(static_cast<size_t>(qkv.size()), 0.0)), 1e-3);  // not zeros
  EXPECT_TRUE(sliced_bf16.bit_equal(cast_after));
  // Forward mode, through a bf16 product of two slices.
  auto product = [](const Tensor& x, bool cast_first) {
    const Tensor y = cast_first ? cast(x, DType::bf16) : x;
    auto part = [&](int64_t i) {
      const Tensor s = reshape(slice(y, {i, 0, 0, 0, 0}, {i + 1, 2, 2, 16, 8}), {64, 8});
      return cast_first ? s : cast(s, DType::bf16);
    };
    return matmul(part(0), part(1), DType::f32, false, true);
  };
  const Array tx = testing::random_f32({3, 2, 2, 16, 8}, 23);
  auto tangents = [&](bool cast_first) {
    return jit([&](const Tensor& x, const Tensor& t) {
      return std::get<1>(jvp([&](const Tensor& y) { return product(y, cast_first); }, x, t));
    })(qkv, tx);
  };
  EXPECT_TRUE(tangents(true).bit_equal(tangents(false)));
}

TEST(Precision, GradientsOfABf16ProductAreF32) {
  const int64_t n = 16, in = 48, out = 20;
  ArrayDict p;
  linear_params(p, "l", in, out, 8);
  const Array x = testing::random_f32({n, in}, 9), c = testing::random_f32({n, out}, 10);
  auto g = jit([](const Params& q, const Tensor& v, const Tensor& ct) {
    PrecisionScope s({.compute = DType::bf16});
    return grad([&](const Params& w, const Tensor& xs) { return sum(linear(w, "l", xs) * ct); },
                argnums<0, 1>)(q, v);
  });
  auto [gp, gx] = g(p, x, c);
  ASSERT_EQ(gp["l/w"].dtype(), DType::f32);
  ASSERT_EQ(gp["l/b"].dtype(), DType::f32);
  ASSERT_EQ(gx.dtype(), DType::f32);
  const Vec xr = rounded(testing::values(x)), wr = rounded(testing::values(p["l/w"]));
  const Vec cr = rounded(testing::values(c)), cv = testing::values(c);
  Vec dw(in * out, 0.0), dx(n * in, 0.0), db(out, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      db[o] += cv[r * out + o];  // the bias's cotangent is the f32 one, not rounded
      for (int64_t k = 0; k < in; ++k) {
        dw[k * out + o] += xr[r * in + k] * cr[r * out + o];
        dx[r * in + k] += cr[r * out + o] * wr[k * out + o];
      }
    }
  EXPECT_LT(max_error(gp["l/w"], dw), 1e-5);
  EXPECT_LT(max_error(gx, dx), 1e-5);
  EXPECT_LT(max_error(gp["l/b"], db), 1e-5);
}

TEST(Precision, Conv2dUnderBf16MatchesTheRoundedHostLoop) {
  // 3 channels: the patches copy channel runs of 6 bytes; 16: of one 32-byte piece (patches.cc).
  for (const int64_t c : {3, 16}) {
    SCOPED_TRACE(c);
    const int64_t b = 2, h = 7, w = 6, o = 5, k = 3;
    ArrayDict p;
    conv2d_params(p, "c", {k, k, c, o}, 11);
    p.set("c/b", testing::random_f32({o}, 12));
    const Array x = testing::random_f32({b, h, w, c}, 13);
    auto f = jit([](const Params& q, const Tensor& v) {
      PrecisionScope s({.compute = DType::bf16});
      return conv2d(q, "c", v, ConvOptions{.padding = Padding::same()});
    });
    const Array y = f(p, x);
    ASSERT_EQ(y.dtype(), DType::f32);
    const Vec xr = rounded(testing::values(x)), wr = rounded(testing::values(p["c/w"]));
    const Vec bv = testing::values(p["c/b"]);
    Vec want(b * h * w * o);
    for (int64_t n = 0; n < b; ++n)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          for (int64_t oc = 0; oc < o; ++oc) {
            double acc = 0;
            for (int64_t di = 0; di < k; ++di)
              for (int64_t dj = 0; dj < k; ++dj) {
                const int64_t ii = i + di - 1, jj = j + dj - 1;
                if (ii < 0 || ii >= h || jj < 0 || jj >= w) continue;
                for (int64_t ic = 0; ic < c; ++ic)
                  acc += xr[((n * h + ii) * w + jj) * c + ic] * wr[((di * k + dj) * c + ic) * o + oc];
              }
            want[((n * h + i) * w + j) * o + oc] = acc + bv[oc];
          }
    EXPECT_LT(max_error(y, want), 2e-5);
  }
}

// Non-causal, two heads, with biases: the qkv and out projections on bf16-rounded operands,
// the attention on bf16-rounded q, k, v with its probabilities rounded for P v, the rest in
// double.
TEST(Precision, AttentionUnderBf16MatchesTheRoundedHostLoop) {
  const int64_t bt = 2, t = 6, d = 16, heads = 2, dh = d / heads;
  const MultiHeadAttentionOptions o{.heads = heads, .causal = false};
  ArrayDict p;
  multi_head_attention_params(p, "a", d, 14, o);
  p.set("a/qkv/b", testing::random_f32({3 * d}, 15));
  p.set("a/out/b", testing::random_f32({d}, 16));
  const Array x = testing::random_f32({bt, t, d}, 17);
  auto f = jit([o](const Params& q, const Tensor& v) {
    PrecisionScope s({.compute = DType::bf16});
    return multi_head_attention(q, "a", v, o);
  });
  const Array y = f(p, x);
  ASSERT_EQ(y.dtype(), DType::f32);
  const Vec xr = rounded(testing::values(x));
  const Vec wq = rounded(testing::values(p["a/qkv/w"])), bq = testing::values(p["a/qkv/b"]);
  const Vec wo = rounded(testing::values(p["a/out/w"])), bo = testing::values(p["a/out/b"]);
  Vec want;
  for (int64_t s = 0; s < bt; ++s) {
    const Vec xs(xr.begin() + s * t * d, xr.begin() + (s + 1) * t * d);
    const Vec qkv = rounded(host_affine(xs, wq, bq, t, d, 3 * d));  // q, k, v enter attention in bf16
    Vec mixed(t * d, 0.0);
    for (int64_t hd = 0; hd < heads; ++hd)
      for (int64_t i = 0; i < t; ++i) {
        Vec sc(t);
        for (int64_t j = 0; j < t; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < dh; ++e) dot += qkv[i * 3 * d + hd * dh + e] * qkv[j * 3 * d + d + hd * dh + e];
          sc[j] = dot / std::sqrt(static_cast<double>(dh));
        }
        // One key block: P = exp(s - max) rounded to bf16 for P v, the row sum of the unrounded P.
        const double m = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& v : sc) {
          z += v = std::exp(v - m);
          v = bf16_round(v);
        }
        for (int64_t j = 0; j < t; ++j)
          for (int64_t e = 0; e < dh; ++e) mixed[i * d + hd * dh + e] += sc[j] / z * qkv[j * 3 * d + 2 * d + hd * dh + e];
      }
    const Vec out = host_affine(rounded(mixed), wo, bo, t, d, d);
    want.insert(want.end(), out.begin(), out.end());
  }
  // A mixed value whose f32 and double forms round to different bf16 neighbours moves its
  // product by one bf16 step of one operand: rare, and below this bound at these sizes.
  EXPECT_LT(max_error(y, want), 1e-4);
}

}  // namespace

namespace examples {
namespace {

using fjit::testing::synthetic_images;

std::pair<ArrayDict, ArrayDict> train(const training::TrainOptions& o, int threads, int steps) {
  setenv("FJIT_INTRA_OP_THREADS", std::to_string(threads).c_str(), 1);
  Trainer t(Mesh::threads(2), o, synthetic_images(2 * o.batch_size, 9));
  unsetenv("FJIT_INTRA_OP_THREADS");
  for (int i = 0; i < steps; ++i) EXPECT_TRUE(t.step().has_value());
  return {t.params(), t.optimizer_state()};
}

class Bf16Training : public ::testing::TestWithParam<const char*> {};

TEST_P(Bf16Training, F32MasterWeightsAndBitsIndependentOfIntraOpThreads) {
  training::TrainOptions o;
  o.model = GetParam();
  o.batch_size = 64;
  o.lr = 1e-3;
  o.seed = 11;
  o.log_every = 0;
  o.epochs = 10;
  o.compute_dtype = "bf16";
  const auto [params1, state1] = train(o, 1, 2);
  const auto [params2, state2] = train(o, 2, 2);
  for (const auto& [name, a] : params1) EXPECT_EQ(a.dtype(), DType::f32) << name;
  for (const auto& [name, a] : state1) EXPECT_NE(a.dtype(), DType::bf16) << name;
  testing::expect_bit_equal(params1, params2, o.model + " parameters, 1 vs 2 intra-op threads");
  testing::expect_bit_equal(state1, state2, o.model + " optimizer state, 1 vs 2 intra-op threads");
  o.compute_dtype = "f32";  // and the policy changed the step
  const auto [params32, state32] = train(o, 1, 2);
  bool differs = false;
  for (const auto& [name, a] : params32)
    differs = differs || a.to_vector<float>() != params1[name].to_vector<float>();
  EXPECT_TRUE(differs);
}

INSTANTIATE_TEST_SUITE_P(Models, Bf16Training, ::testing::Values("cnn", "vit"));

}  // namespace
}  // namespace examples
}  // namespace fjit
