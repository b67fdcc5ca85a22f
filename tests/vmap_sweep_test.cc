// The vmap sweep: every op of the table (core/ir/ops.def) under vmap against a host loop that
// calls the unbatched function, jitted, on each example. Each case runs with every operand
// batched, and with each single operand batched and the others shared by every example, so
// each batching rule meets batched and unbatched operands. A case's tolerance is 0 (bit for
// bit) unless its kernels sum in another order when batched (a GEMM over the batch's rows, a
// reduction blocked differently, the transcendental unary kernels' SIMD tail: see
// tests/vmap_test.cc), then 1e-5 relative (f32). VmapSweep.EveryOpIsCovered names an op
// without a case.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct SweepCase {
  const char* name;
  std::vector<Op> ops;             // the ops this case puts under vmap
  std::vector<ValueType> ins;      // one example's operands
  Fn f;
  double tol = 0;
  bool positive = false;           // float operands in [0.1, 2.1)
  std::vector<int32_t> int_range{0, 3};  // i32 operands uniform in [lo, hi)
};

Array random_operand(const ValueType& t, const SweepCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Array a(t.dtype, t.shape);
  std::uniform_real_distribution<double> u(c.positive ? 0.1 : -2.0, c.positive ? 2.1 : 2.0);
  std::uniform_int_distribution<int32_t> ui(c.int_range[0], c.int_range[1] - 1);
  for (int64_t i = 0; i < a.size(); ++i) {
    switch (t.dtype) {
      case DType::f32: a.data<float>()[i] = static_cast<float>(u(rng)); break;
      case DType::f64: a.data<double>()[i] = u(rng); break;
      case DType::i32: a.data<int32_t>()[i] = ui(rng); break;
      case DType::u32: a.data<uint32_t>()[i] = static_cast<uint32_t>(rng()); break;
      case DType::boolean: a.data<uint8_t>()[i] = u(rng) > 0; break;
      default: ADD_FAILURE() << "no random operands of " << dtype_name(t.dtype);
    }
  }
  return a;
}

using testing::row;
using testing::stack_rows;

std::string key(size_t i) { return std::string(1, static_cast<char>('a' + i)); }

// Runs case `c` with the operands in `batched` batched (B examples) and the others shared.
void run(const SweepCase& c, const std::set<size_t>& batched) {
  const int64_t B = 3;
  ArrayDict bd, sd;
  std::vector<ArrayDict> examples(B);
  for (size_t i = 0; i < c.ins.size(); ++i) {
    if (batched.count(i)) {
      Shape s{B};
      s.insert(s.end(), c.ins[i].shape.begin(), c.ins[i].shape.end());
      const Array a = random_operand({c.ins[i].dtype, s}, c, static_cast<uint32_t>(11 + i));
      bd.set(key(i), a);
      for (int64_t b = 0; b < B; ++b) examples[b].set(key(i), row(a, b));
    } else {
      const Array a = random_operand(c.ins[i], c, static_cast<uint32_t>(31 + i));
      sd.set(key(i), a);
      for (int64_t b = 0; b < B; ++b) examples[b].set(key(i), a);
    }
  }
  const size_t n = c.ins.size();
  auto ordered = [n](const TensorDict& x, const TensorDict& y) {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < n; ++i) ts.push_back(x.contains(key(i)) ? x[key(i)] : y[key(i)]);
    return ts;
  };
  const Fn f = c.f;
  JitOptions o;
  o.checks = CheckMode::user;  // the check case records its check
  auto one = jit([f, ordered](const TensorDict& all) { return f(ordered(all, TensorDict{})); }, o);
  auto many = jit([f, ordered](const TensorDict& x, const TensorDict& y) {
    return vmap([&](const TensorDict& xb, const TensorDict& ys) { return f(ordered(xb, ys)); },
                {0, kUnbatched})(x, y);
  }, o);
  std::vector<Array> rows;
  for (int64_t b = 0; b < B; ++b) rows.push_back(one(examples[b]));
  const Array want = stack_rows(rows);
  Array got = many(bd, sd);
  std::string what = std::string(c.name) + ", batched operands:";
  for (size_t i : batched) what += " " + key(i);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  if (c.tol == 0) {
    EXPECT_TRUE(got.bit_equal(want)) << what;
    return;
  }
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.at_as_double(i), w = want.at_as_double(i);
    ASSERT_LE(std::abs(g - w), c.tol * std::max(1.0, std::abs(w))) << what << " element " << i;
  }
}

const ValueType f32(Shape s) { return {DType::f32, std::move(s)}; }
const ValueType i32(Shape s) { return {DType::i32, std::move(s)}; }

std::vector<SweepCase> cases();

TEST(VmapSweep, EveryCaseWithEveryOperandBatchedAndEachAlone) {
  int runs = 0;
  for (const SweepCase& c : cases()) {
    std::set<size_t> all;
    for (size_t i = 0; i < c.ins.size(); ++i) all.insert(i);
    auto guarded = [&](const std::set<size_t>& batched) {
      try {
        ++runs;
        run(c, batched);
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.name << ": " << e.what();
      }
    };
    guarded(all);
    if (c.ins.size() > 1)
      for (size_t i = 0; i < c.ins.size(); ++i) guarded({i});
  }
  EXPECT_GE(runs, 50);
  std::printf("vmap sweep: %d runs\n", runs);
}

TEST(VmapSweep, EveryOpIsCovered) {
  std::set<Op> covered;
  for (const SweepCase& c : cases()) covered.insert(c.ops.begin(), c.ops.end());
  // Collectives run under pmap: CollectivesUnderPmapOfVmap below.
  covered.insert({Op::AllReduce, Op::AllGather, Op::AxisIndex});
  covered.insert({Op::ReduceScatter, Op::AllToAll, Op::Permute});  // ShardingCollectivesUnderPmapOfVmap
  std::string missing;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op == Op::Parameter) continue;  // the arguments themselves
    if (!covered.count(op)) missing += std::string(" ") + op_name(op);
  }
  EXPECT_TRUE(missing.empty()) << "ops without a vmap case:" << missing;
}

// pmap(vmap(...)) on thread replicas: the batch axis passes through all_reduce and
// all_gather; axis_index is shared by every example.
TEST(VmapSweep, CollectivesUnderPmapOfVmap) {
  const int n = 2;
  Mesh mesh = Mesh::threads(n);
  auto f = pmap(mesh, "r", [](const Tensor& x) {  // x [B=2, 3] per replica
    return vmap([](const Tensor& v) {
      Tensor i = cast(axis_index("r"), DType::f32);
      return std::tuple{psum(v + i, "r"), all_gather(reshape(sum(v), {1}), "r")};
    })(x);
  });
  const Array x = testing::random_f32({n * 2, 3}, 5);
  auto [s, g] = f(x);
  ASSERT_EQ(s.shape(), (Shape{2, 3}));
  ASSERT_EQ(g.shape(), (Shape{2, n}));
  const float* xv = x.data<float>();
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < 3; ++j) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += xv[(r * 2 + b) * 3 + j] + static_cast<float>(r);
      EXPECT_FLOAT_EQ(s.data<float>()[b * 3 + j], want);
    }
    for (int r = 0; r < n; ++r) {
      float want = 0;
      for (int j = 0; j < 3; ++j) want += xv[(r * 2 + b) * 3 + j];
      EXPECT_FLOAT_EQ(g.data<float>()[b * n + r], want);
    }
  }
}

// The collectives on axis-0 blocks under pmap(vmap(...)): example b of every replica's batch
// gives the bits that pmap of the unbatched function gives on example b alone (each result
// all-gathered, so that every replica returns the same).
TEST(VmapSweep, ShardingCollectivesUnderPmapOfVmap) {
  const int n = 2, batch = 2;
  Mesh mesh = Mesh::threads(n);
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"psum_scatter", [](const Tensor& v) { return psum_scatter(v * v, "r", 0, true); }},
      {"psum_scatter dim 1", [](const Tensor& v) { return psum_scatter(v, "r", 1, true); }},
      {"all_to_all", [](const Tensor& v) { return all_to_all(v, "r", 0, 1, true); }},
      {"ppermute", [](const Tensor& v) { return ppermute(v + 1.0f, "r", {{0, 1}, {1, 0}}); }},
      {"all_gather axis 1", [](const Tensor& v) { return all_gather(v, "r", 1, true); }},
  };
  const Array x = testing::random_f32({n * batch, 4, 2}, 9);  // [4, 2] per example
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    auto batched = pmap(mesh, "r", [op](const Tensor& xs) {
      return all_gather(vmap([op](const Tensor& v) { return op(v); })(xs), "r");
    });
    auto single = pmap(mesh, "r", [op](const Tensor& v) { return all_gather(op(v), "r"); });
    const Array got = batched(x);  // [n * batch, ...]: replica r's example b at r * batch + b
    const int64_t per = x.size() / (n * batch);
    for (int b = 0; b < batch; ++b) {
      Array xb(DType::f32, {n * 4, 2});  // example b of every replica
      for (int r = 0; r < n; ++r)
        std::memcpy(xb.data<float>() + r * per, x.data<float>() + (r * batch + b) * per, per * sizeof(float));
      const Array want = single(xb);  // [n * d0, ...]: replica r's block at r * d0
      ASSERT_EQ(got.shape()[0], n * batch);
      const int64_t block = want.size() / n;
      ASSERT_EQ(got.size(), n * batch * block);
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(std::memcmp(got.data<float>() + (r * batch + b) * block, want.data<float>() + r * block,
                              block * sizeof(float)), 0) << "replica " << r << ", example " << b;
    }
  }
}

std::vector<SweepCase> cases() {
  using V = std::vector<Tensor>;
  std::vector<SweepCase> cs;
  auto unary = [&](const char* name, Op op, Tensor (*fn)(const Tensor&, Loc), bool positive, double tol) {
    cs.push_back({name, {op}, {f32({2, 3})}, [fn](const V& v) { return fn(v[0], Loc::current()); }, tol, positive});
  };
  unary("neg", Op::Neg, neg, false, 0);
  unary("abs", Op::Abs, abs, false, 0);
  unary("exp", Op::Exp, exp, false, 1e-5);
  unary("log", Op::Log, log, true, 1e-5);
  unary("log1p", Op::Log1p, log1p, true, 1e-5);
  unary("sqrt", Op::Sqrt, sqrt, true, 1e-5);
  unary("rsqrt", Op::Rsqrt, rsqrt, true, 1e-5);
  unary("tanh", Op::Tanh, tanh, false, 1e-5);
  unary("sin", Op::Sin, sin, false, 1e-5);
  unary("cos", Op::Cos, cos, false, 1e-5);
  unary("erf", Op::Erf, erf, false, 1e-5);
  unary("gelu", Op::Gelu, gelu_exact, false, 1e-5);
  unary("gelu_grad", Op::GeluGrad, gelu_exact_grad, false, 1e-5);
  unary("sigmoid", Op::Sigmoid, sigmoid, false, 1e-5);
  unary("relu", Op::Relu, relu, false, 0);
  unary("sign", Op::Sign, sign, false, 0);
  unary("stop_gradient", Op::StopGradient, stop_gradient, false, 0);
  cs.push_back({"isfinite/cast/constant", {Op::IsFinite, Op::Cast, Op::Constant}, {f32({2, 3})},
                [](const V& v) { return cast(isfinite(v[0] / 0.0), DType::f32) + cast(cast(v[0], DType::i32), DType::f32); }});
  cs.push_back({"binary", {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Maximum, Op::Minimum}, {f32({2, 3}), f32({3})},
                [](const V& v) { return maximum(v[0] + v[1], v[0] * v[1]) - minimum(v[0] / (abs(v[1]) + 1.0), v[1]); }});
  cs.push_back({"pow", {Op::Pow}, {f32({2, 3}), f32({2, 1})}, [](const V& v) { return pow(v[0], v[1]); }, 1e-5, true});
  cs.push_back({"compare/logical/select", {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::LogicalAnd,
                                           Op::LogicalOr, Op::LogicalNot, Op::Select},
                {f32({2, 3}), f32({3})}, [](const V& v) {
                  Tensor m = logical_or(logical_and(v[0] < v[1], v[0] <= v[1]), logical_not(v[0] > v[1]));
                  Tensor k = logical_or(eq(v[0], v[1]), logical_and(ne(v[0], v[1]), v[0] >= v[1]));
                  return where(logical_and(m, k), v[0], v[1]);
                }});
  cs.push_back({"matmul", {Op::MatMul}, {f32({2, 4}), f32({4, 3})},
                [](const V& v) { return matmul(v[0], v[1]) + sum(matmul(v[1], v[0], true, true)); }, 1e-5});
  cs.push_back({"matmul batched dims", {Op::MatMul}, {f32({2, 3, 4}), f32({2, 4, 2})},
                [](const V& v) { return matmul(v[0], v[1]); }, 1e-5});
  cs.push_back({"reductions", {Op::ReduceSum, Op::ReduceMax, Op::ReduceMin, Op::ArgMax, Op::ArgMin, Op::Iota},
                {f32({3, 4})}, [](const V& v) {
                  Tensor a = cast(argmax(v[0], 1) + sum(argmin(v[0], 0, true)) + iota(DType::i32, {3}), DType::f32);
                  return sum(v[0], {1}) + max(v[0], {1}) * min(v[0], {1}) + a;
                }, 1e-5});
  cs.push_back({"all/any", {Op::ReduceAll, Op::ReduceAny}, {f32({3, 4})},
                [](const V& v) { return cast(logical_and(all(v[0] > -1.0, {1}), any(v[0] > 1.0, {1})), DType::f32); }});
  cs.push_back({"top_k", {Op::TopK, Op::Gather}, {f32({3, 5})}, [](const V& v) {
                  auto [vals, idx] = top_k(v[0], 2);
                  return vals + cast(idx, DType::f32);
                }});
  cs.push_back({"layout", {Op::Reshape, Op::Transpose, Op::BroadcastTo, Op::Concat, Op::Slice, Op::Cumsum},
                {f32({2, 3}), f32({3})}, [](const V& v) {
                  Tensor c = concat({v[0], broadcast_to(v[1], {2, 3})}, 0);            // [4, 3]
                  Tensor t = transpose(reshape(c, {2, 2, 3}), {2, 0, 1});              // [3, 2, 2]
                  return cumsum(slice(t, {0, 0, 1}, {3, 2, 2}), 0, true);
                }});
  cs.push_back({"gather/scatter_add", {Op::Gather, Op::ScatterAdd}, {f32({3, 4}), i32({2})},
                [](const V& v) {
                  Tensor g = take(v[0], v[1], 1);
                  return scatter_add(g * 3.0, v[1], {3, 4}, 1) + v[0];
                }, 0, false, {-1, 5}});  // out-of-range indices: clamped by gather, dropped by scatter
  cs.push_back({"patches and its adjoint (grad)", {Op::Patches, Op::PatchesAdjoint}, {f32({1, 4, 4, 2})},
                [](const V& v) {
                  Window w;
                  w.size = {2, 2};
                  w.padding = Padding::same();
                  return grad([w](const Tensor& x) { return sum(square(patches(x, w))); })(v[0]);
                }, 1e-5});
  cs.push_back({"max_pool and its grad", {Op::MaxPool, Op::MaxPoolGrad}, {f32({1, 4, 5, 2})},
                [](const V& v) {
                  return grad([](const Tensor& x) {
                    return sum(square(max_pool(x, {2, 2}, {1, 2}, Padding::same())));
                  })(v[0]);
                }, 1e-5});
  cs.push_back({"attention and its grad", {Op::Attention, Op::AttentionGrad}, {f32({1, 2, 3, 4}), f32({1, 2, 3, 4}), f32({1, 2, 3, 4})},
                [](const V& v) {
                  return grad([&](const Tensor& q) { return sum(dot_product_attention(q, v[1], v[2], true)); })(v[0]);
                }, 1e-5});
  cs.push_back({"softmax_xent and its grad", {Op::SoftmaxXent, Op::SoftmaxXentGrad}, {f32({2, 5}), i32({2})},
                [](const V& v) {
                  return grad([&](const Tensor& z) { return sum(softmax_xent(z, v[1])); })(v[0]);
                }, 1e-5, false, {0, 5}});
  cs.push_back({"random from a batched or shared key", {Op::RandomBits, Op::FoldIn, Op::RandomUnit},
                {{DType::u32, {2}}, i32({})}, [](const V& v) {
                  return normal(fold_in(v[0], v[1]), {2, 3}) + uniform(v[0], {2, 3});
                }, 1e-5});
  cs.push_back({"check", {Op::Check}, {f32({3})}, [](const V& v) {
                  check(sum(v[0]) < 100.0, "sum {}", sum(v[0]));
                  return v[0] * 2.0;
                }});
  cs.push_back({"scan (fori_loop) and its output", {Op::Scan, Op::Output}, {f32({3}), f32({3})},
                [](const V& v) {
                  return fori_loop(0, 3, [&](const Tensor&, const Tensor& c) { return c * v[1] + 1.0; }, v[0]);
                }});
  cs.push_back({"cond", {Op::Cond}, {f32({3}), f32({})}, [](const V& v) {
                  return cond(v[1] > 0.0, [](const Tensor& x) { return x * 2.0; }, [](const Tensor& x) { return -x; }, v[0]);
                }});
  cs.push_back({"while_loop", {Op::WhileLoop}, {f32({3})}, [](const V& v) {
                  auto [i, x] = while_loop([](const std::pair<Tensor, Tensor>& s) { return s.first < 4.0 + sum(s.second) * 0.0; },
                                           [](const std::pair<Tensor, Tensor>& s) { return std::pair{s.first + 1.0, s.second * 0.5}; },
                                           std::pair{scalar(DType::f32, 0.0), v[0]});
                  return x + i;
                }});
  cs.push_back({"custom_vjp and remat (grad)", {Op::CustomVjp, Op::Remat}, {f32({3})}, [](const V& v) {
                  auto twice = custom_vjp([](const Tensor& x) { return std::pair{x * 2.0, x}; },
                                          [](const Tensor&, const Tensor& ct) { return ct * 2.0; });
                  auto cube = remat([](const Tensor& x) { return x * x * x; });
                  return grad([&](const Tensor& x) { return sum(twice(x) + cube(x)); })(v[0]);
                }});
  return cs;
}

}  // namespace
}  // namespace fjit
