// Fused attention (core/trace/attention.h) against the composed attention (matmul, scale,
// where-mask, softmax, matmul of existing ops) in float64: values and the gradients of q, k, v
// to 1e-12; the bits of every intra-op thread count; decoding with traced key lengths; a row
// with no key when checks are off; trace-time errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f32;
using testing::random_f64;

struct Config {
  int64_t b, h, tq, tk, dh, dv;
  bool causal;
  std::vector<int32_t> lengths;  // empty: none
  double scale = 0;
};

// softmax(q k^T * scale + mask) v written with the table's ordinary ops.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& lengths,
                double scale) {
  const int64_t b = q.dim(0), tq = q.dim(2), tk = k.dim(2);
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(q.dim(3)));
  Tensor s = matmul(q, k, false, true) * scale;
  Tensor mask;
  if (causal) {
    Tensor rows = iota(DType::f64, {tq, tk}, 0), cols = iota(DType::f64, {tq, tk}, 1);
    mask = le(cols, rows + static_cast<double>(tk - tq));
  }
  if (lengths.defined()) {
    Tensor cols = iota(DType::f64, {b, 1, 1, tk}, 3);
    Tensor visible = lt(cols, reshape(cast(lengths, DType::f64), {b, 1, 1, 1}));
    mask = mask.defined() ? logical_and(mask, visible) : visible;
  }
  if (mask.defined()) s = where(mask, s, full(s.dtype(), {}, -INFINITY));
  Tensor e = exp(s - max(s, {3}, true));
  return matmul(e / sum(e, {3}, true), v);
}

Array lengths_array(const Config& c) { return Array::from_vector<int32_t>(c.lengths); }

// The loss both sides differentiate: sum(out * w) with fixed weights.
Tensor weighted(const Tensor& out) {
  return sum(out * constant(random_f64(out.shape(), 5)));
}

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int reported = 0;
  for (int64_t i = 0; i < got.size() && reported < 5; ++i) {
    const double g = got.at_as_double(i), w = want.at_as_double(i);
    if (!(std::abs(g - w) <= tol * std::max(1.0, std::abs(w)))) {
      ADD_FAILURE() << what << " element " << i << ": fused " << g << " vs composed " << w;
      ++reported;
    }
  }
}

TEST(Attention, MatchesTheComposedAttentionInFloat64) {
  const Config configs[] = {
      {1, 1, 4, 4, 3, 3, true, {}},
      {2, 3, 70, 150, 8, 5, true, {}, 0.3},      // several key blocks, Tq < Tk, dh != dv
      {2, 2, 130, 70, 6, 9, false, {}},           // Tq > Tk, not causal
      {3, 2, 67, 129, 4, 6, true, {129, 1, 80}},  // causal and key lengths
      {2, 1, 5, 40, 7, 3, false, {40, 17}},
  };
  for (const Config& c : configs) {
    SCOPED_TRACE(::testing::Message() << c.tq << "x" << c.tk << (c.causal ? " causal" : "")
                                      << (c.lengths.empty() ? "" : " lengths"));
    const Array q = random_f64({c.b, c.h, c.tq, c.dh}, 1), k = random_f64({c.b, c.h, c.tk, c.dh}, 2),
                v = random_f64({c.b, c.h, c.tk, c.dv}, 3);
    const Array len = c.lengths.empty() ? Array::from_vector<int32_t>({0}) : lengths_array(c);
    const bool has_len = !c.lengths.empty();
    auto both = [&](bool fused) {
      return jit([fused, has_len, c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& len) {
        auto attend = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          const Tensor l = has_len ? len : Tensor();
          return fused ? dot_product_attention(q, k, v, c.causal, l, c.scale) : composed(q, k, v, c.causal, l, c.scale);
        };
        auto [loss, g] = value_and_grad([&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return weighted(attend(q, k, v));
        }, argnums<0, 1, 2>)(q, k, v);
        return std::tuple{attend(q, k, v), loss, std::get<0>(g), std::get<1>(g), std::get<2>(g)};
      });
    };
    auto fused = both(true), reference = both(false);
    auto [o, l, gq, gk, gv] = fused(q, k, v, len);
    auto [ro, rl, rgq, rgk, rgv] = reference(q, k, v, len);
    expect_close(o, ro, 1e-12, "out");
    expect_close(l, rl, 1e-12, "loss");
    expect_close(gq, rgq, 1e-12, "dq");
    expect_close(gk, rgk, 1e-12, "dk");
    expect_close(gv, rgv, 1e-12, "dv");
  }
}

// The same bits with 1, 2 and 3 intra-op threads, forward and backward, f32 (where a change
// of summation order shows).
TEST(Attention, BitsDoNotDependOnTheThreadCount) {
  const Array q = random_f32({2, 3, 200, 16}, 1), k = random_f32({2, 3, 260, 16}, 2),
              v = random_f32({2, 3, 260, 24}, 3);
  const Array len = Array::from_vector<int32_t>({260, 150});
  auto step = jit([](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& len) {
    auto [loss, g] = value_and_grad([&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return weighted(cast(dot_product_attention(q, k, v, true, len), DType::f64));
    }, argnums<0, 1, 2>)(q, k, v);
    return std::tuple{dot_product_attention(q, k, v, true, len), std::get<0>(g), std::get<1>(g), std::get<2>(g)};
  });
  const int saved = intra_op_threads();
  std::vector<std::vector<Array>> runs;
  for (int threads : {1, 2, 3}) {
    set_intra_op_threads(threads);
    auto [o, gq, gk, gv] = step(q, k, v, len);
    runs.push_back({o, gq, gk, gv});
  }
  set_intra_op_threads(saved);
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t i = 0; i < runs[0].size(); ++i)
      EXPECT_EQ(0, std::memcmp(runs[0][i].raw(), runs[r][i].raw(), runs[0][i].size() * sizeof(float)))
          << "result " << i << " with " << r + 1 << " threads";
}

// f32 with heads of 64: the block products run on the packed GEMM (packed_gemm.h). Against the
// composed attention in float64 (values and gradients to float rounding), and the same bits
// with 1 and 2 intra-op threads.
TEST(Attention, Float32OnThePackedGemmMatchesFloat64) {
  const Config c{2, 2, 100, 150, 64, 64, true, {150, 90}};
  const Array q = random_f32({c.b, c.h, c.tq, c.dh}, 1), k = random_f32({c.b, c.h, c.tk, c.dh}, 2),
              v = random_f32({c.b, c.h, c.tk, c.dv}, 3);
  const Array len = lengths_array(c);
  auto both = [&](bool fused) {
    return jit([fused, c](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& len) {
      auto attend = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        if (fused) return cast(dot_product_attention(q, k, v, c.causal, len), DType::f64);
        return composed(cast(q, DType::f64), cast(k, DType::f64), cast(v, DType::f64), c.causal, len, 0);
      };
      auto [loss, g] = value_and_grad([&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return weighted(attend(q, k, v));
      }, argnums<0, 1, 2>)(q, k, v);
      return std::tuple{attend(q, k, v), cast(std::get<0>(g), DType::f64),
                        cast(std::get<1>(g), DType::f64), cast(std::get<2>(g), DType::f64)};
    });
  };
  auto fused = both(true), reference = both(false);
  const int saved = intra_op_threads();
  set_intra_op_threads(1);
  auto [o, gq, gk, gv] = fused(q, k, v, len);
  set_intra_op_threads(2);
  auto [o2, gq2, gk2, gv2] = fused(q, k, v, len);
  set_intra_op_threads(saved);
  auto [ro, rgq, rgk, rgv] = reference(q, k, v, len);
  expect_close(o, ro, 2e-5, "out");
  expect_close(gq, rgq, 2e-4, "dq");
  expect_close(gk, rgk, 2e-4, "dk");
  expect_close(gv, rgv, 2e-4, "dv");
  EXPECT_TRUE(o.bit_equal(o2) && gq.bit_equal(gq2) && gk.bit_equal(gk2) && gv.bit_equal(gv2));
}

// Decoding: a fixed-size KV cache, one query, the valid length a traced value. One trace
// serves every position.
TEST(Attention, DecodingWithTracedKeyLengthsTracesOnce) {
  const int64_t tmax = 90;
  const Array kc = random_f64({2, 2, tmax, 8}, 2), vc = random_f64({2, 2, tmax, 8}, 3);
  auto decode = jit([](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& len) {
    return dot_product_attention(q, k, v, false, len);
  });
  auto reference = jit([](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& len) {
    return composed(q, k, v, false, len, 0);
  });
  for (int32_t pos : {0, 1, 63, 64, 89}) {
    const Array q = random_f64({2, 2, 1, 8}, 10 + pos);
    const Array len = Array::from_vector<int32_t>({pos + 1, std::min(pos + 5, 90)});
    expect_close(decode(q, kc, vc, len), reference(q, kc, vc, len), 1e-12, "decode");
  }
  EXPECT_EQ(decode.core().trace_count(), 1);
}

// With checks off, a batch index whose length is 0 (or clamped to 0) gets zeros and zero
// gradients, never NaN; lengths above Tk are clamped to Tk.
TEST(Attention, RowsWithNoKeyAreZerosWhenChecksAreOff) {
  JitOptions off;
  off.checks = CheckMode::off;
  const Array q = random_f64({3, 2, 4, 5}, 1), k = random_f64({3, 2, 6, 5}, 2), v = random_f64({3, 2, 6, 3}, 3);
  auto step = jit([](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& len) {
    auto [loss, g] = value_and_grad([&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return weighted(dot_product_attention(q, k, v, false, len));
    }, argnums<0, 1, 2>)(q, k, v);
    return std::tuple{dot_product_attention(q, k, v, false, len), std::get<0>(g), std::get<1>(g)};
  }, off);
  auto [o, gq, gk] = step(q, k, v, Array::from_vector<int32_t>({0, -3, 9}));
  auto [full_o, fgq, fgk] = step(q, k, v, Array::from_vector<int32_t>({6, 6, 6}));
  const int64_t per_batch = 2 * 4 * 3;
  for (int64_t i = 0; i < 2 * per_batch; ++i) EXPECT_EQ(o.data<double>()[i], 0.0) << i;
  for (int64_t i = 0; i < 2 * 2 * 4 * 5; ++i) EXPECT_EQ(gq.data<double>()[i], 0.0) << i;
  for (int64_t i = 0; i < 2 * 2 * 6 * 5; ++i) EXPECT_EQ(gk.data<double>()[i], 0.0) << i;
  for (int64_t i = 2 * per_batch; i < 3 * per_batch; ++i)  // 9 is clamped to Tk = 6
    EXPECT_EQ(o.data<double>()[i], full_o.data<double>()[i]) << i;
}

std::string trace_error(const std::function<Tensor()>& fn) {
  try {
    auto f = jit([&](const Tensor&) { return fn(); });
    f(Array(DType::f32, {1}));
  } catch (const TraceError& e) {
    return e.what();
  }
  return "<no error>";
}

void expect_has(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

TEST(Attention, BadOperandsAreTraceErrorsNamingTheOpShapesAndLine) {
  auto z = [](DType t, Shape s) { return full(t, s, 0); };
  int line = __LINE__ + 2;
  std::string m = trace_error([&] {
    return dot_product_attention(z(DType::f32, {1, 2, 3, 4}), z(DType::f32, {1, 2, 5, 8}), z(DType::f32, {1, 2, 5, 4}), false);
  });
  expect_has(m, {"dot_product_attention(f32[1,2,3,4], f32[1,2,5,8], f32[1,2,5,4])", "equal B, H, dh and Tk",
                 "attention_test.cc:" + std::to_string(line)});
  m = trace_error([&] {
    return dot_product_attention(z(DType::f32, {1, 2, 3, 4}), z(DType::f64, {1, 2, 5, 4}), z(DType::f32, {1, 2, 5, 4}), false);
  });
  expect_has(m, {"dot_product_attention(", "dtype mismatch"});
  m = trace_error([&] {
    return dot_product_attention(z(DType::i32, {1, 1, 3, 4}), z(DType::i32, {1, 1, 5, 4}), z(DType::i32, {1, 1, 5, 4}), false);
  });
  expect_has(m, {"f32, f64 or bf16"});
  m = trace_error([&] {
    return dot_product_attention(z(DType::f32, {2, 3, 4}), z(DType::f32, {2, 3, 4}), z(DType::f32, {2, 3, 4}), false);
  });
  expect_has(m, {"dot_product_attention(f32[2,3,4]", "rank 4"});
  m = trace_error([&] {
    return dot_product_attention(z(DType::f32, {1, 1, 6, 4}), z(DType::f32, {1, 1, 5, 4}), z(DType::f32, {1, 1, 5, 4}), true);
  });
  expect_has(m, {"causal attention with more queries than keys (Tq 6 > Tk 5)"});
  m = trace_error([&] {
    return dot_product_attention(z(DType::f32, {2, 1, 3, 4}), z(DType::f32, {2, 1, 5, 4}), z(DType::f32, {2, 1, 5, 4}),
                                 false, z(DType::f32, {2}));
  });
  expect_has(m, {"key lengths i32[2], got f32[2]"});
}

}  // namespace
}  // namespace fjit
