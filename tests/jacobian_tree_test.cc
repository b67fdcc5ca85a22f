// jacfwd, jacrev and hessian computed batched (one vmap over the identity basis,
// core/autodiff/jacobian.h), in float64:
//  - on Tensors, against the per-element walks (detail::jacfwd_per_element,
//    detail::jacobian_rev), through elementwise ops, a product, a scan and a cond;
//  - on TensorDicts in and out, against central differences of the function on the host;
//  - the Hessian of a TensorDict loss against central differences of its gradient, and
//    symmetric (H[a][b] is H[b][a] transposed).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/fjit.h"
#include "tests/grad_cases.h"

namespace fjit {
namespace {

using grad_cases::In;
using grad_cases::make_input;

void expect_near_all(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t e = 0; e < got.size(); ++e)
    EXPECT_NEAR(got.data<double>()[e], want.data<double>()[e], tol * (1 + std::abs(want.data<double>()[e])))
        << what << " element " << e;
}

Tensor scan_fn(const Tensor& x) {
  const Tensor xs = constant(make_input(In{{2, 3}}, 9));
  auto [c, ys] = scan([&](const Tensor& c, const Tensor& r) {
    Tensor next = tanh(c * x + r) + sin(c);
    return std::pair{next, next * c};
  }, x * 0.5, xs);
  return c * sum(ys);
}

TEST(JacobianTree, BatchedJacobiansEqualThePerElementWalks) {
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<Shape, Fn>> fns = {
      {{3}, [](const Tensor& x) { return sin(x) * sum(x * x); }},
      {{2, 3}, [](const Tensor& x) { return matmul(x, x, false, true); }},
      {{3}, scan_fn},
      {{2, 2}, [](const Tensor& x) { return cond(sum(x) > -100.0, [](const Tensor& a) { return exp(a) * a; },
                                                 [](const Tensor& a) { return a; }, x); }},
  };
  for (size_t k = 0; k < fns.size(); ++k) {
    SCOPED_TRACE(k);
    const Fn& fn = fns[k].second;
    auto f = jit([&](const Tensor& x) {
      const Loc loc = Loc::current();
      return std::tuple{jacfwd(fn)(x), detail::jacfwd_per_element(fn, x, loc), jacrev(fn)(x),
                        detail::jacobian_rev(fn(x), x, loc)};
    });
    auto [jf, jf1, jr, jr1] = f(make_input(In{fns[k].first}, 11 + k));
    expect_near_all(jf, jf1, 1e-13, "jacfwd");
    expect_near_all(jr, jr1, 1e-13, "jacrev");
    expect_near_all(jf, jr, 1e-12, "jacfwd against jacrev");
  }
}

// f({a [2, 3], b [3]}) = {u: a sin(b) [2], v: sum(a * a) * b [3]}.
TensorDict dict_fn(const TensorDict& p) {
  TensorDict out;
  out.set("u", reshape(matmul(p["a"], reshape(sin(p["b"]), {3, 1})), {2}));
  out.set("v", sum(p["a"] * p["a"]) * p["b"]);
  return out;
}

ArrayDict dict_point() {
  ArrayDict p;
  p.set("a", make_input(In{{2, 3}}, 21));
  p.set("b", make_input(In{{3}}, 22));
  return p;
}

// p with element j of entry `name` moved by +h and by -h (central differences).
std::pair<ArrayDict, ArrayDict> nudged(const ArrayDict& p, const std::string& name, int64_t j, double h) {
  ArrayDict up = p, down = p;
  up.set(name, p[name].clone());
  down.set(name, p[name].clone());
  up.at(name).data<double>()[j] += h;
  down.at(name).data<double>()[j] -= h;
  return {up, down};
}

// H[a][b] flattened into one TensorDict "<a>/<b>", which jit returns.
TensorDict flat(const Dict<TensorDict>& j) {
  TensorDict out;
  for (const auto& [yn, row] : j)
    for (const auto& [xn, block] : row) out.set(yn + "/" + xn, block);
  return out;
}

TEST(JacobianTree, JacobiansOfADictFunctionMatchCentralDifferences) {
  auto f = jit([](const TensorDict& p) { return std::tuple{flat(jacfwd(dict_fn)(p)), flat(jacrev(dict_fn)(p))}; });
  auto fwd = jit(dict_fn);
  const ArrayDict p = dict_point();
  auto [jf, jr] = f(p);
  ASSERT_EQ(jf.size(), 4u);
  const double h = 1e-6;
  for (const std::string xn : {"a", "b"}) {
    const int64_t n = p[xn].size();
    for (int64_t j = 0; j < n; ++j) {
      const auto [up, down] = nudged(p, xn, j, h);
      const ArrayDict yu = fwd(up), yd = fwd(down);
      for (const std::string yn : {"u", "v"}) {
        const Array& bf = jf[yn + "/" + xn];
        const Array& br = jr[yn + "/" + xn];
        Shape want = yu[yn].shape();
        const Shape x_shape = p[xn].shape();
        want.insert(want.end(), x_shape.begin(), x_shape.end());
        ASSERT_EQ(bf.shape(), want) << yn << "/" << xn;
        for (int64_t i = 0; i < yu[yn].size(); ++i) {
          const double fd = (yu[yn].data<double>()[i] - yd[yn].data<double>()[i]) / (2 * h);
          EXPECT_NEAR(bf.data<double>()[i * n + j], fd, 1e-7 + 1e-7 * std::abs(fd)) << yn << "/" << xn << " " << i << "," << j;
          EXPECT_NEAR(br.data<double>()[i * n + j], bf.data<double>()[i * n + j], 1e-12) << yn << "/" << xn;
        }
      }
    }
  }
}

// A small MLP loss of {w [3, 2], b [2]}.
Tensor mlp_loss(const TensorDict& p) {
  const Tensor x = constant(make_input(In{{4, 3}}, 31));
  return sum(tanh(matmul(x, p["w"]) + p["b"]) * tanh(matmul(x, p["w"]) + p["b"]));
}

TEST(JacobianTree, HessianOfADictLossMatchesGradientDifferencesAndIsSymmetric) {
  auto hess = jit([](const TensorDict& p) { return flat(hessian(mlp_loss)(p)); });
  auto g = jit([](const TensorDict& p) { return grad(mlp_loss)(p); });
  ArrayDict p;
  p.set("w", make_input(In{{3, 2}}, 32));
  p.set("b", make_input(In{{2}}, 33));
  const ArrayDict H = hess(p);
  ASSERT_EQ(H["w/b"].shape(), (Shape{3, 2, 2}));
  ASSERT_EQ(H["b/w"].shape(), (Shape{2, 3, 2}));
  const double h = 1e-5;
  for (const std::string xn : {"w", "b"}) {
    const int64_t n = p[xn].size();
    for (int64_t j = 0; j < n; ++j) {
      const auto [up, down] = nudged(p, xn, j, h);
      const ArrayDict gu = g(up), gd = g(down);
      for (const std::string yn : {"w", "b"}) {
        const Array& block = H[yn + "/" + xn];
        for (int64_t i = 0; i < p[yn].size(); ++i) {
          const double fd = (gu[yn].data<double>()[i] - gd[yn].data<double>()[i]) / (2 * h);
          EXPECT_NEAR(block.data<double>()[i * n + j], fd, 1e-7 + 1e-6 * std::abs(fd)) << yn << "/" << xn;
          // Symmetry: H[y][x][i, j] = H[x][y][j, i].
          EXPECT_NEAR(block.data<double>()[i * n + j], H[xn + "/" + yn].data<double>()[j * p[yn].size() + i], 1e-12);
        }
      }
    }
  }
}

TEST(JacobianTree, AnIntegerLeafIsATraceErrorNamingTheCaller) {
  auto f = jit([](const Tensor& x) { return jacfwd([](const Tensor& v) { return v * v; })(x); });
  EXPECT_THROW(f(Array::from_vector<int32_t>({1, 2}, {2})), TraceError);
}

}  // namespace
}  // namespace fjit
