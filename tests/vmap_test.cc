// vmap (core/autodiff/vmap.h) against its oracle: the unbatched function, jitted, called on
// each example in a host loop, the results stacked. Bit for bit where the batched plan runs
// the example's kernels in the example's order (elementwise, layout, indexing, reductions
// over the example's own axes, random draws); a relative tolerance of 1e-5 (f32) where a
// batched product joins the examples' rows into one GEMM, whose blocking may sum in another
// order.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f32;

using testing::row;
using testing::stack_rows;

// tol 0: bit for bit.
void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  if (tol == 0) {
    EXPECT_TRUE(got.bit_equal(want)) << what;
    return;
  }
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.at_as_double(i), w = want.at_as_double(i);
    ASSERT_LE(std::abs(g - w), tol * std::max(1.0, std::abs(w))) << what << " element " << i;
  }
}

Tensor mixed(const Tensor& x, const Tensor& y) {
  // Elementwise with a broadcast operand, a reduction, layout ops, an index op.
  Tensor e = exp(x) * y + sqrt(abs(x));
  Tensor r = sum(e, {1}, true) - max(e, {0});
  Tensor t = transpose(concat({r, slice(e, {0, 1}, {2, 3})}, 1));
  Tensor c = cumsum(t, 1);
  Tensor idx = argmax(c, 0);
  return take(reshape(c, {-1}), idx, 0) + sum(broadcast_to(x, {2, 2, 3}));
}

// Which ops are bit for bit: the unary kernels of transcendental functions (exp, sqrt)
// compute SIMD packets and a scalar tail by different code, so an element's bits depend on its
// place in the buffer, which batching moves; a reduction over a whole example is blocked
// differently from the same reduction over each row of a batch. Those get a tolerance of one
// part in 1e6; the rest must be bit for bit.
TEST(Vmap, EachKindOfOpIsBitIdenticalOrWithinItsStatedTolerance) {
  const int64_t B = 5;
  const Array xs = random_f32({B, 2, 3}, 1), y = random_f32({3}, 2);
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<Fn, double>> cases = {
      {[](const Tensor& x, const Tensor&) { return exp(x); }, 1e-6},
      {[](const Tensor& x, const Tensor&) { return sqrt(abs(x)); }, 1e-6},
      {[](const Tensor& x, const Tensor&) { return sum(broadcast_to(x, {2, 2, 3})); }, 1e-6},
      {[](const Tensor& x, const Tensor& yy) { return x * yy - yy / (abs(x) + 1.0); }, 0},
      {[](const Tensor& x, const Tensor&) { return sum(x, {1}, true); }, 0},
      {[](const Tensor& x, const Tensor&) { return max(x, {0}); }, 0},
      {[](const Tensor& x, const Tensor&) { return cumsum(x, 1); }, 0},
      {[](const Tensor& x, const Tensor&) { return transpose(concat({x, slice(x, {0, 1}, {2, 3})}, 1)); }, 0},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Fn f = cases[k].first;
    auto one = jit([f](const Tensor& x, const Tensor& yy) { return f(x, yy); });
    auto batched = jit([f](const Tensor& x, const Tensor& yy) { return vmap(f, {0, kUnbatched})(x, yy); });
    std::vector<Array> rows;
    for (int64_t i = 0; i < B; ++i) rows.push_back(one(row(xs, i), y));
    expect_close(batched(xs, y), stack_rows(rows), cases[k].second, "case " + std::to_string(k));
  }
}

TEST(Vmap, ACompositeOfElementwiseLayoutReductionAndIndexOps) {
  const int64_t B = 5;
  const Array xs = random_f32({B, 2, 3}, 1), y = random_f32({3}, 2);
  auto one = jit([](const Tensor& x, const Tensor& yy) { return mixed(x, yy); });
  auto batched = jit([](const Tensor& x, const Tensor& yy) { return vmap(mixed, {0, kUnbatched})(x, yy); });
  std::vector<Array> rows;
  for (int64_t i = 0; i < B; ++i) rows.push_back(one(row(xs, i), y));
  expect_close(batched(xs, y), stack_rows(rows), 1e-6, "mixed");
}

TEST(Vmap, InAxesAndOutAxesMoveTheBatchAxis) {
  const Array xt = random_f32({3, 4}, 3);  // the batch (4) on axis 1
  auto f = jit([](const Tensor& x) {
    return vmap([](const Tensor& v) { return std::tuple{v * 2.0, sum(v)}; }, {1}, {1, 0})(x);
  });
  auto [doubled, sums] = f(xt);
  EXPECT_EQ(doubled.shape(), (Shape{3, 4}));
  EXPECT_EQ(sums.shape(), (Shape{4}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t b = 0; b < 4; ++b)
      EXPECT_EQ(doubled.data<float>()[i * 4 + b], 2 * xt.data<float>()[i * 4 + b]);
  for (int64_t b = 0; b < 4; ++b) {
    float s = 0;
    for (int64_t i = 0; i < 3; ++i) s += xt.data<float>()[i * 4 + b];
    EXPECT_NEAR(sums.data<float>()[b], s, 1e-6);
  }
}

TEST(Vmap, MatMulEveryBatchingOfItsOperands) {
  const int64_t B = 4;
  const Array a = random_f32({B, 3, 5}, 4), b = random_f32({B, 5, 2}, 5);
  const Array a1 = row(a, 1), b1 = row(b, 2);
  auto one = jit([](const Tensor& x, const Tensor& y) { return matmul(x, y) + sum(matmul(y, x, true, true)); });
  auto f = [](const Tensor& x, const Tensor& y) { return matmul(x, y) + sum(matmul(y, x, true, true)); };
  auto both = jit([&](const Tensor& x, const Tensor& y) { return vmap(f)(x, y); });
  auto left = jit([&](const Tensor& x, const Tensor& y) { return vmap(f, {0, kUnbatched})(x, y); });
  auto right = jit([&](const Tensor& x, const Tensor& y) { return vmap(f, {kUnbatched, 0})(x, y); });
  std::vector<Array> rb, rl, rr;
  for (int64_t i = 0; i < B; ++i) {
    rb.push_back(one(row(a, i), row(b, i)));
    rl.push_back(one(row(a, i), b1));
    rr.push_back(one(a1, row(b, i)));
  }
  expect_close(both(a, b), stack_rows(rb), 1e-5, "both batched");
  expect_close(left(a, b1), stack_rows(rl), 1e-5, "left batched");
  expect_close(right(a1, b), stack_rows(rr), 1e-5, "right batched");
}

Tensor pick(const Tensor& x, const Tensor& idx) {
  Tensor g = take(x, idx, 1);                                          // [3, 2]
  Tensor s = scatter_add(g * 2.0, idx, {3, 4}, 1);                     // back into [3, 4]
  return g + sum(s, {1}, true);
}

TEST(Vmap, GatherAndScatterWithBatchedOperandIndicesOrBoth) {
  const int64_t B = 3;
  const Array x = random_f32({B, 3, 4}, 6);
  const Array idx = Array::from_vector<int32_t>({0, 3, 2, 2, 1, 0}, {B, 2});
  const Array x0 = row(x, 0), i0 = row(idx, 1);
  auto one = jit(pick);
  auto both = jit([](const Tensor& a, const Tensor& i) { return vmap(pick)(a, i); });
  auto xb = jit([](const Tensor& a, const Tensor& i) { return vmap(pick, {0, kUnbatched})(a, i); });
  auto ib = jit([](const Tensor& a, const Tensor& i) { return vmap(pick, {kUnbatched, 0})(a, i); });
  std::vector<Array> r2, rx, ri;
  for (int64_t b = 0; b < B; ++b) {
    r2.push_back(one(row(x, b), row(idx, b)));
    rx.push_back(one(row(x, b), i0));
    ri.push_back(one(x0, row(idx, b)));
  }
  expect_close(both(x, idx), stack_rows(r2), 0, "both batched");
  expect_close(xb(x, i0), stack_rows(rx), 0, "operand batched");
  expect_close(ib(x0, idx), stack_rows(ri), 0, "indices batched");
}

TEST(Vmap, NestedVmapIsAnOuterProductOfLoops) {
  const Array xs = random_f32({3, 4}, 7), ys = random_f32({2, 4}, 8);
  auto f = jit([](const Tensor& x, const Tensor& y) {
    auto dot = [](const Tensor& a, const Tensor& b) { return sum(a * b); };
    return vmap(vmap(dot, {0, kUnbatched}), {kUnbatched, 0})(x, y);  // [ys, xs]
  });
  const Array got = f(xs, ys);
  ASSERT_EQ(got.shape(), (Shape{2, 3}));
  auto one = jit([](const Tensor& a, const Tensor& b) { return sum(a * b); });
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(got.data<float>()[j * 3 + i], one(row(xs, i), row(ys, j)).item<float>());
}

// The per-example loss of a two-layer MLP: x [D], label i32 [].
Tensor example_loss(const TensorDict& p, const Tensor& x, const Tensor& label) {
  Tensor h = tanh(matmul(reshape(x, {1, -1}), p["w1"]) + p["b1"]);
  Tensor logits = matmul(h, p["w2"]) + p["b2"];
  return sum(softmax_xent(logits, reshape(label, {1})));
}

TEST(Vmap, PerExampleGradientsEqualALoopOfGrad) {
  const int64_t B = 6;
  ArrayDict p;
  p.set("w1", random_f32({4, 5}, 9));
  p.set("b1", random_f32({5}, 10));
  p.set("w2", random_f32({5, 3}, 11));
  p.set("b2", random_f32({3}, 12));
  const Array x = random_f32({B, 4}, 13);
  const Array y = Array::from_vector<int32_t>({0, 2, 1, 1, 0, 2}, {B});
  auto per_example = jit([](const TensorDict& params, const Tensor& xs, const Tensor& ys) {
    return vmap(grad(example_loss), {kUnbatched, 0, 0})(params, xs, ys);
  });
  auto one = jit([](const TensorDict& params, const Tensor& xi, const Tensor& yi) {
    return grad(example_loss)(params, xi, yi);
  });
  const ArrayDict g = per_example(p, x, y);
  std::vector<ArrayDict> loop;
  for (int64_t i = 0; i < B; ++i) loop.push_back(one(p, row(x, i), row(y, i)));
  ASSERT_EQ(g.names(), p.names());
  for (const auto& [name, a] : g) {
    std::vector<Array> rows;
    for (const ArrayDict& l : loop) rows.push_back(l[name]);
    expect_close(a, stack_rows(rows), 1e-5, name);
  }
}

// The products of a plan: its "matmul <type>" instructions, in order.
std::vector<std::string> products(const std::string& plan) {
  std::vector<std::string> out;
  for (size_t at = plan.find("= matmul "); at != std::string::npos; at = plan.find("= matmul ", at + 1))
    out.push_back(plan.substr(at + 2, plan.find(' ', at + 9) - at - 2));
  return out;
}

// vmap of the example loss is the hand-batched loss's computation: the same GEMMs over the
// whole batch (not one per example), the rest reshapes and a sum over each example's row.
TEST(Vmap, TheBatchedLossRunsTheHandBatchedProducts) {
  ArrayDict p;
  p.set("w1", random_f32({4, 5}, 9));
  p.set("b1", random_f32({5}, 10));
  p.set("w2", random_f32({5, 3}, 11));
  p.set("b2", random_f32({3}, 12));
  const Array x = random_f32({8, 4}, 13);
  const Array y = Array::from_vector<int32_t>({0, 2, 1, 1, 0, 2, 1, 0}, {8});
  auto batched = jit([](const TensorDict& q, const Tensor& xs, const Tensor& ys) {
    return mean(vmap(example_loss, {kUnbatched, 0, 0})(q, xs, ys));
  });
  auto hand = jit([](const TensorDict& q, const Tensor& xs, const Tensor& ys) {
    Tensor h = tanh(matmul(xs, q["w1"]) + q["b1"]);
    return mean(softmax_xent(matmul(h, q["w2"]) + q["b2"], ys));
  });
  const Array a = batched(p, x, y), b = hand(p, x, y);
  EXPECT_NEAR(a.item<float>(), b.item<float>(), 1e-6);
  const std::vector<std::string> pv = products(batched.core().last_entry()->exe->plan_string());
  const std::vector<std::string> ph = products(hand.core().last_entry()->exe->plan_string());
  // One product per layer over the whole batch: each example's row [1, K] keeps its unit axis
  // ([8, 1, K] x [K, N]), which the kernel folds into the GEMM's 8 rows, as the hand's [8, K].
  EXPECT_EQ(ph, (std::vector<std::string>{"matmul f32[8,5]", "matmul f32[8,3]"}));
  EXPECT_EQ(pv, (std::vector<std::string>{"matmul f32[8,1,5]", "matmul f32[8,1,3]"}));
}

TEST(Vmap, RandomKeysFollowJax) {
  auto f = jit([](const Tensor& key, const Tensor& x) {
    auto draw = [](const Tensor& k, const Tensor& v) { return v + uniform(k, {3}); };
    Tensor keys = split(key, 4);
    Tensor per_key = vmap(draw)(keys, x);                     // each example its own key
    Tensor shared = vmap(draw, {kUnbatched, 0})(key, x);      // one draw for every example
    return std::tuple{per_key, shared};
  });
  const Array x = Array::zeros(DType::f32, {4, 3});
  auto [per_key, shared] = f(prng_key_array(7), x);
  auto keys_of = jit([](const Tensor& key) { return split(key, 4); });
  auto one = jit([](const Tensor& k) { return uniform(k, {3}); });
  const Array keys = keys_of(prng_key_array(7));
  const Array same = one(prng_key_array(7));
  for (int64_t i = 0; i < 4; ++i) {
    expect_close(row(per_key, i), one(row(keys, i)), 0, "per-example key");
    expect_close(row(shared, i), same, 0, "shared key");
  }
  EXPECT_FALSE(row(per_key, 0).bit_equal(row(per_key, 1)));
}

TEST(Vmap, ScanAndCondWithABatchedPredicate) {
  auto body = [](const Tensor& x) {
    Tensor s = fori_loop(0, 3, [](const Tensor&, const Tensor& c) { return c * 0.5 + 1.0; }, x);
    return cond(sum(s) > 4.0, [](const Tensor& v) { return v * 2.0; }, [](const Tensor& v) { return -v; }, s);
  };
  const Array xs = Array::from_vector<float>({1, 2, 9, 9, -3, 0}, {3, 2});
  auto one = jit(body);
  auto batched = jit([&](const Tensor& x) { return vmap(body)(x); });
  std::vector<Array> rows;
  for (int64_t i = 0; i < 3; ++i) rows.push_back(one(row(xs, i)));
  expect_close(batched(xs), stack_rows(rows), 0, "fori_loop + cond");
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Tensor scan_loss(const Tensor& c0, const Tensor& xs) {  // c0 [2], xs [4, 2]
  auto [c, ys] = scan([](const Tensor& c, const Tensor& x) { return std::pair{tanh(c * x + 1.0), c + x}; }, c0, xs);
  return sum(c) + sum(ys * ys);
}

// A scan over a batch is one loop of the batched body (not one loop per example), forward and
// through its VJP, with the loop's values.
TEST(Vmap, AScanOverABatchIsOneLoopForwardAndBackward) {
  const int64_t B = 3;
  const Array c0 = random_f32({B, 2}, 20), xs = random_f32({B, 4, 2}, 21);
  auto batched = jit([](const Tensor& c, const Tensor& x) { return vmap(scan_loss)(c, x); });
  auto grads = jit([](const Tensor& c, const Tensor& x) { return vmap(grad(scan_loss, argnums<0, 1>))(c, x); });
  auto one = jit(scan_loss);
  auto one_grad = jit([](const Tensor& c, const Tensor& x) { return grad(scan_loss, argnums<0, 1>)(c, x); });
  std::vector<Array> rows, gc, gx;
  for (int64_t i = 0; i < B; ++i) {
    rows.push_back(one(row(c0, i), row(xs, i)));
    auto [a, b] = one_grad(row(c0, i), row(xs, i));
    gc.push_back(a);
    gx.push_back(b);
  }
  expect_close(batched(c0, xs), stack_rows(rows), 1e-6, "scan forward");
  auto [dc, dx] = grads(c0, xs);
  expect_close(dc, stack_rows(gc), 1e-6, "scan grad wrt the carry");
  expect_close(dx, stack_rows(gx), 1e-6, "scan grad wrt xs");
  EXPECT_EQ(count_of(batched.core().last_entry()->exe->plan_string(), "= scan"), 1);
  EXPECT_EQ(count_of(grads.core().last_entry()->exe->plan_string(), "= scan"), 2);  // forward, backward
}

TEST(Vmap, ACheckReportsTheFirstFailingBatchElement) {
  JitOptions o;
  o.checks = CheckMode::user;
  o.policy = CheckPolicy::throw_error;
  auto f = jit([](const Tensor& x) {
    return vmap([](const Tensor& v) {
      Tensor s = sum(v);
      check(s < 10.0, "sum {} too large", s);
      return s;
    })(x);
  }, o);
  EXPECT_NO_THROW(f(Array::from_vector<float>({1, 2, 3, 4}, {2, 2})));
  const std::string what = testing::error_of<CheckError>(
      [&] { f(Array::from_vector<float>({1, 2, 3, 4, 8, 9, 20, 0}, {4, 2})); });
  EXPECT_NE(what.find("sum 17 too large (vmap batch element 2)"), std::string::npos) << what;
}

TEST(Vmap, MismatchedBatchSizesAreATraceErrorNamingTheArguments) {
  auto f = jit([](const Tensor& a, const Tensor& b) { return vmap([](const Tensor& x, const Tensor& y) { return x + y; })(a, b); });
  const std::string what = testing::error_of<TraceError>(
      [&] { f(Array::zeros(DType::f32, {3, 2}), Array::zeros(DType::f32, {4, 2})); });
  EXPECT_NE(what.find("batch sizes differ"), std::string::npos) << what;
  EXPECT_NE(what.find("arg1 f32[4,2]"), std::string::npos) << what;
  EXPECT_NE(what.find("vmap_test.cc"), std::string::npos) << what;
}

}  // namespace
}  // namespace fjit
