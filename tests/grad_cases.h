// The float64 differentiation cases shared by the reverse-mode gradient check
// (tests/grad_check_test.cc) and the forward-mode JVP check (tests/jvp_check_test.cc): for every
// differentiable op of core/ir/ops.def, functions of a few inputs whose inputs avoid the kinks
// of relu/abs/max except in deliberate tie cases, with the step and tolerances of each.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/lib/initializers.h"
#include "parallel/fjit.h"

namespace fjit::grad_cases {

enum class Dom { any, positive, away_from_zero };

struct In {
  Shape shape;
  Dom dom = Dom::any;
  std::vector<double> values = {};  // explicit values (ties); random when empty
};

struct GradCase {
  std::string name;
  std::set<Op> ops;  // the differentiable ops this case checks
  std::vector<In> ins;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  double h = 1e-6, atol = 1e-6, rtol = 1e-6;
};

inline Array make_input(const In& in, uint64_t seed) {
  Array a(DType::f64, in.shape);
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < a.size(); ++i) {
    double v = in.values.empty() ? 4.0 * rng.uniform() - 2.0 : in.values[i];
    if (in.values.empty() && in.dom == Dom::positive) v = std::abs(v) + 0.2;
    if (in.values.empty() && in.dom == Dom::away_from_zero && std::abs(v) < 0.2) v = v < 0 ? -0.5 : 0.5;
    a.data<double>()[i] = v;
  }
  return a;
}

// Fixed weights of y's shape, made at trace time from y's type.
inline Tensor weights_like(const Tensor& y) {
  Array w(y.dtype(), y.shape());
  SplitMix64 rng(99);
  for (int64_t i = 0; i < w.size(); ++i) w.data<double>()[i] = 0.5 + rng.uniform();
  return constant(w);
}

inline std::string key(size_t i) { return fmt::format("x{}", i); }

inline ArrayDict make_inputs(const GradCase& c) {
  ArrayDict d;
  for (size_t i = 0; i < c.ins.size(); ++i) d.set(key(i), make_input(c.ins[i], 1000 + 17 * i));
  return d;
}

inline Tensor case_loss(const GradCase& c, const Params& p) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < c.ins.size(); ++i) xs.push_back(p[key(i)]);
  Tensor y = c.f(xs);
  return sum(mul(y, weights_like(y)));
}

// Compares reverse-mode `grads` with central differences of `forward` at `x`.
template <class Forward>
inline void compare(const GradCase& c, ArrayDict x, const ArrayDict& grads, Forward forward) {
  for (size_t i = 0; i < x.size(); ++i) {
    Array& xi = x.value(i);
    const Array& gi = grads.at(x.name(i));
    ASSERT_EQ(gi.shape(), xi.shape()) << c.name;
    for (int64_t e = 0; e < xi.size(); ++e) {
      double* v = xi.data<double>() + e;
      const double saved = *v;
      *v = saved + c.h;
      const double up = forward(x);
      *v = saved - c.h;
      const double down = forward(x);
      *v = saved;
      const double fd = (up - down) / (2 * c.h), rev = gi.data<double>()[e];
      EXPECT_NEAR(rev, fd, c.atol + c.rtol * std::abs(fd))
          << c.name << ": d/d" << x.name(i) << "[" << e << "]";
    }
  }
}

inline Tensor idx(std::vector<int32_t> v) { return constant(Array::from_vector(v)); }

inline std::vector<GradCase> cases() {
  using V = const std::vector<Tensor>&;
  std::vector<GradCase> cs;
  auto unary = [&](const char* name, Op op, Dom dom, Tensor (*fn)(const Tensor&, Loc)) {
    cs.push_back({name, {op}, {{{2, 3}, dom}}, [fn](V x) { return fn(x[0], Loc::current()); }});
  };
  unary("neg", Op::Neg, Dom::any, neg);
  unary("abs", Op::Abs, Dom::away_from_zero, abs);
  unary("exp", Op::Exp, Dom::any, exp);
  unary("log", Op::Log, Dom::positive, log);
  unary("log1p", Op::Log1p, Dom::positive, log1p);
  unary("sqrt", Op::Sqrt, Dom::positive, sqrt);
  unary("rsqrt", Op::Rsqrt, Dom::positive, rsqrt);
  unary("tanh", Op::Tanh, Dom::any, tanh);
  unary("sin", Op::Sin, Dom::any, sin);
  unary("cos", Op::Cos, Dom::any, cos);
  unary("sigmoid", Op::Sigmoid, Dom::any, sigmoid);
  unary("relu", Op::Relu, Dom::away_from_zero, relu);
  unary("erf", Op::Erf, Dom::any, erf);
  unary("gelu", Op::Gelu, Dom::any, gelu_exact);
  unary("gelu_grad", Op::GeluGrad, Dom::any, gelu_exact_grad);
  // Through f32: central differences need a step far above f32's rounding.
  cs.push_back({"cast f64->f32->f64", {Op::Cast}, {{{2, 3}}},
                [](V x) { return cast(cast(x[0], DType::f32) * 3.0, DType::f64); }, 1e-2, 1e-4, 1e-4});

  cs.push_back({"add broadcast [2,3]+[3]", {Op::Add}, {{{2, 3}}, {{3}}}, [](V x) { return x[0] + x[1]; }});
  cs.push_back({"sub broadcast [2,1]-[1,3]", {Op::Sub}, {{{2, 1}}, {{1, 3}}}, [](V x) { return x[0] - x[1]; }});
  cs.push_back({"mul broadcast [2,3]*[]", {Op::Mul}, {{{2, 3}}, {{}}}, [](V x) { return x[0] * x[1]; }});
  cs.push_back({"div broadcast [3]/[2,3]", {Op::Div}, {{{3}}, {{2, 3}, Dom::away_from_zero}},
                [](V x) { return x[0] / x[1]; }});
  cs.push_back({"pow [2,3]^[3]", {Op::Pow}, {{{2, 3}, Dom::positive}, {{3}}}, [](V x) { return pow(x[0], x[1]); }});
  cs.push_back({"maximum broadcast", {Op::Maximum}, {{{2, 3}}, {{3}}}, [](V x) { return maximum(x[0], x[1]); }});
  cs.push_back({"minimum broadcast", {Op::Minimum}, {{{2, 3}}, {{2, 1}}}, [](V x) { return minimum(x[0], x[1]); }});
  cs.push_back({"maximum ties", {Op::Maximum}, {{{4}, Dom::any, {1, 2, -3, 4}}, {{4}, Dom::any, {1, 2.5, -3, 3}}},
                [](V x) { return maximum(x[0], x[1]); }});
  cs.push_back({"minimum ties", {Op::Minimum}, {{{3}, Dom::any, {1, 2, 0.5}}, {{3}, Dom::any, {1, 2, -1}}},
                [](V x) { return minimum(x[0], x[1]); }});
  cs.push_back({"where broadcast", {Op::Select}, {{{2, 3}}, {{3}}}, [](V x) {
                  Array c = Array::from_vector(std::vector<uint8_t>{1, 0, 1, 0, 0, 1}, {2, 3});
                  return where(constant(c), x[0], x[1]);
                }});

  auto mm = [&](std::string name, Shape a, Shape b, bool ta, bool tb) {
    cs.push_back({"matmul " + name, {Op::MatMul}, {{a}, {b}},
                  [ta, tb](V x) { return matmul(x[0], x[1], ta, tb); }});
  };
  mm("[3,4]x[4,5]", {3, 4}, {4, 5}, false, false);
  mm("trans_a", {4, 3}, {4, 5}, true, false);
  mm("trans_b", {3, 4}, {5, 4}, false, true);
  mm("trans_a trans_b", {4, 3}, {5, 4}, true, true);
  mm("batched", {2, 3, 4}, {2, 4, 5}, false, false);
  mm("batched trans_a trans_b", {2, 4, 3}, {2, 5, 4}, true, true);
  mm("batched x rank-2", {2, 3, 4}, {4, 5}, false, false);
  mm("batched x rank-2 trans_b", {2, 3, 4}, {5, 4}, false, true);
  mm("batched trans_a x rank-2", {2, 4, 3}, {4, 5}, true, false);
  mm("rank-2 x batched", {3, 4}, {2, 4, 5}, false, false);
  mm("rank-2 trans_a x batched trans_b", {4, 3}, {2, 5, 4}, true, true);

  auto red = [&](std::string name, Op op, Axes axes, bool keep) {
    cs.push_back({name, {op}, {{{2, 3, 4}}}, [op, axes, keep](V x) {
                    return op == Op::ReduceSum ? sum(x[0], axes, keep)
                           : op == Op::ReduceMax ? max(x[0], axes, keep) : min(x[0], axes, keep);
                  }});
  };
  red("sum axis 1", Op::ReduceSum, {1}, false);
  red("sum axes 0,2 keepdims", Op::ReduceSum, {0, 2}, true);
  red("sum all", Op::ReduceSum, {}, false);
  red("max axis -1", Op::ReduceMax, {-1}, false);
  red("min axes 0,1 keepdims", Op::ReduceMin, {0, 1}, true);
  cs.push_back({"max two-way ties", {Op::ReduceMax}, {{{2, 3}, Dom::any, {1, 3, 3, -2, -1, -2}}},
                [](V x) { return max(x[0], {1}); }});
  cs.push_back({"mean axis 0", {Op::ReduceSum, Op::Mul}, {{{3, 2}}}, [](V x) { return mean(x[0], {0}); }});

  cs.push_back({"reshape", {Op::Reshape}, {{{2, 6}}}, [](V x) { return reshape(x[0], {3, 2, 2}); }});
  cs.push_back({"transpose 3d", {Op::Transpose}, {{{2, 3, 4}}}, [](V x) { return transpose(x[0], {2, 0, 1}); }});
  cs.push_back({"broadcast_to", {Op::BroadcastTo}, {{{2, 1}}}, [](V x) { return broadcast_to(x[0], {3, 2, 4}); }});
  cs.push_back({"concat axis 1", {Op::Concat}, {{{2, 1}}, {{2, 3}}, {{2, 2}}},
                [](V x) { return concat({x[0], x[1], x[2]}, 1); }});
  cs.push_back({"slice with steps", {Op::Slice}, {{{6, 5}}},
                [](V x) { return slice(x[0], {1, 0}, {6, 5}, {2, 2}); }});
  cs.push_back({"slice unit steps", {Op::Slice}, {{{4, 5}}}, [](V x) { return slice(x[0], {1, 1}, {3, 4}); }});
  cs.push_back({"gather repeated indices", {Op::Gather}, {{{5, 3}}},
                [](V x) { return take(x[0], idx({0, 2, 2, 4, 2}), 0); }});
  cs.push_back({"gather axis 1", {Op::Gather}, {{{2, 4}}},
                [](V x) { return take(x[0], reshape(idx({3, 3, 0, 1}), {2, 2}), 1); }});
  cs.push_back({"scatter_add repeated indices", {Op::ScatterAdd}, {{{4, 3}}},
                [](V x) { return scatter_add(x[0], idx({1, 1, 3, 0}), {5, 3}, 0); }});
  cs.push_back({"cumsum axis 1", {Op::Cumsum}, {{{2, 4}}}, [](V x) { return cumsum(x[0], 1); }});
  cs.push_back({"cumsum reverse axis 0", {Op::Cumsum}, {{{3, 2, 2}}}, [](V x) { return cumsum(x[0], 0, true); }});
  // top_k's values are a gather of x by its (non-differentiable) indices.
  cs.push_back({"top_k values", {Op::Gather}, {{{3, 5}}}, [](V x) { return top_k(x[0], 3).first; }});
  // remat (core/trace/remat.h): the VJP recomputes fn; its argument and the parameter it
  // captures (x[1]) get gradients.
  cs.push_back({"remat with a captured parameter", {Op::Remat}, {{{2, 3}}, {{3, 3}}, {{3}}}, [](V x) {
    auto f = remat([&](const Tensor& a) { return tanh(matmul(a, x[1]) + x[2]) * sin(a); });
    return f(f(x[0]));
  }});
  // Control flow (core/trace/control_flow.h): the loop's VJP is a reversed scan; the carry,
  // the xs rows and the captured x[2] all get gradients.
  cs.push_back({"scan", {Op::Scan}, {{{2, 3}}, {{4, 2, 3}}, {{2, 3}}}, [](V x) {
    auto [c, ys] = scan([&](const Tensor& c, const Tensor& r) {
      Tensor next = sin(c * r) + x[2];
      return std::pair{next, next * c};
    }, x[0], x[1]);
    return concat({c, reshape(ys, {8, 3})}, 0);
  }});
  cs.push_back({"cond true branch", {Op::Cond}, {{{2, 3}}, {{2, 3}}}, [](V x) {
    return cond(sum(x[0]) > -100.0, [&](const Tensor& a) { return exp(a) * x[1]; },
                [](const Tensor& a) { return a; }, x[0]);
  }});
  cs.push_back({"custom_vjp of tanh with its exact gradient", {Op::CustomVjp}, {{{2, 3}}}, [](V x) {
    auto f = custom_vjp([](const Tensor& a) { Tensor t = tanh(a); return std::pair{t, t}; },
                        [](const Tensor& t, const Tensor& ct) { return ct * (1.0 - t * t); });
    return f(x[0]);
  }});
  // Composites differentiate through their parts.
  cs.push_back({"log_softmax", {}, {{{2, 5}}}, [](V x) { return log_softmax(x[0]); }});
  // The fused op softmax_xent; the label -1 (outside [0, 4)) is a row with loss and gradient 0.
  cs.push_back({"softmax_cross_entropy", {Op::SoftmaxXent}, {{{3, 4}}},
                [](V x) { return softmax_cross_entropy(x[0], idx({0, 3, 1})); }});
  cs.push_back({"softmax_cross_entropy rank 3 with an ignored row", {Op::SoftmaxXent}, {{{2, 2, 5}}},
                [](V x) { return softmax_cross_entropy(x[0] * 3.0, reshape(idx({4, -1, 0, 2}), {2, 2})); }});
  // Window ops, alone and as the layers built on them.
  const Window strided{{3, 2}, {2, 1}, {1, 2}, Padding::explicit_pads(1, 0, 2, 1)};
  cs.push_back({"patches strided dilated padded", {Op::Patches}, {{{2, 5, 6, 2}}},
                [strided](V x) { return patches(x[0], strided); }});
  cs.push_back({"patches_adjoint", {Op::PatchesAdjoint}, {{{2, 2, 7, 12}}},
                [strided](V x) { return patches_adjoint(x[0], strided, {2, 5, 6, 2}); }});
  cs.push_back({"conv2d SAME stride 2", {}, {{{2, 6, 5, 3}}, {{3, 3, 3, 4}}}, [](V x) {
                  return conv2d(x[0], x[1], {{2, 2}, Padding::same()});
                }});
  cs.push_back({"conv2d groups and dilation", {}, {{{1, 7, 7, 4}}, {{2, 2, 2, 6}}}, [](V x) {
                  return conv2d(x[0], x[1], {{1, 1}, Padding::valid(), {2, 2}, 2});
                }});
  cs.push_back({"max_pool SAME", {Op::MaxPool}, {{{2, 5, 5, 3}}},
                [](V x) { return max_pool(x[0], {2, 2}, {2, 2}, Padding::same()); }});
  cs.push_back({"max_pool overlapping windows", {Op::MaxPool}, {{{1, 6, 5, 2}}},
                [](V x) { return max_pool(x[0], {3, 3}, {1, 2}, Padding::explicit_pads(1, 0, 0, 1)); }});
  // Linear in the cotangent; in the image, constant away from ties (random values have none).
  cs.push_back({"max_pool_grad", {Op::MaxPoolGrad}, {{{2, 3, 3, 2}}, {{2, 5, 5, 2}}},
                [](V x) { return max_pool_grad(x[0], x[1], Window{{3, 3}, {2, 2}, {1, 1}, Padding::same()}); }});
  cs.push_back({"avg_pool SAME", {}, {{{2, 5, 5, 3}}},
                [](V x) { return avg_pool(x[0], {3, 3}, {2, 2}, Padding::same()); }});
  cs.push_back({"gelu exact and tanh", {}, {{{2, 3}}},
                [](V x) { return gelu(x[0]) + gelu(x[0] * 0.7, true); }});
  cs.push_back({"layer_norm", {}, {{{3, 5}}, {{5}}, {{5}}},
                [](V x) { return layer_norm(x[0], x[1], x[2]); }});
  cs.push_back({"batch_norm NHWC", {}, {{{3, 2, 2, 4}}, {{4}}, {{4}}}, [](V x) {
                  Tensor zero = zeros_like(x[1]), one = ones_like(x[1]);
                  return batch_norm(x[0], x[1], x[2], zero, one).y;
                }});
  // Fused attention: q, k, v over several key blocks (Tk > 64), causal with Tq < Tk, and key
  // lengths with a fully masked batch index (its gradients are zeros on both sides).
  cs.push_back({"attention causal Tq < Tk", {Op::Attention}, {{{1, 2, 5, 4}}, {{1, 2, 70, 4}}, {{1, 2, 70, 3}}},
                [](V x) { return dot_product_attention(x[0] * 3.0, x[1], x[2], true); }});
  cs.push_back({"attention key lengths", {Op::Attention}, {{{3, 1, 4, 3}}, {{3, 1, 6, 3}}, {{3, 1, 6, 2}}},
                [](V x) {
                  Tensor lengths = constant(Array::from_vector<int32_t>({6, 0, 2}));
                  return dot_product_attention(x[0], x[1], x[2], false, lengths, 0.8);
                }});
  // stop_gradient differs from finite differences by design: tests/nn_test.cc.
  return cs;
}

}  // namespace fjit::grad_cases
