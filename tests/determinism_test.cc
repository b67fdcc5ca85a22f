// Results do not depend on the intra-op thread count (README: reproducibility).
//
//  - Every matmul path (blocked: f32 on the packed GEMM, f64 on the Eigen-based driver; folded
//    batch, narrow, batched, deep products of many depth blocks, transposed operands,
//    f32/f64/i32) gives the same bits with 1, 2, 3 and 4 threads, and matches a
//    double-accumulated product to rounding (FJIT_ISA=avx2, as CI's second pass, for the AVX2
//    kernel).
//  - Large fused elementwise passes (Adam's update, with further results) likewise.
//  - Training steps of the example models (MLP, CNN, ViT) on two thread replicas give the same
//    parameters and optimizer state with 1 and 2 intra-op threads per replica.
// The MPI side (ranks against thread replicas with another thread count) is
// tests/mpi/determinism_mpi_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "core/lib/optimizers.h"
#include "lib/trainer.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::expect_bit_equal;

struct Case {
  const char* what;
  int64_t batch_a, batch_b, m, k, n;  // batch 0: the operand is rank 2
  bool ta, tb;
  DType dtype;
};

Shape shape_of(int64_t batch, int64_t rows, int64_t cols) {
  return batch ? Shape{batch, rows, cols} : Shape{rows, cols};
}

Array random_values(DType t, const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<double> u(-1, 1);
  Array a(t, s);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (t == DType::i32) a.data<int32_t>()[i] = small(rng);
    else if (t == DType::f64) a.data<double>()[i] = u(rng);
    else a.data<float>()[i] = static_cast<float>(u(rng));
  }
  return a;
}

double element(const Array& a, int64_t i) {
  if (a.dtype() == DType::i32) return a.data<int32_t>()[i];
  if (a.dtype() == DType::f64) return a.data<double>()[i];
  return a.data<float>()[i];
}

// The product by plain loops in double, and the bound |A||B| of each element for the error.
void expect_matches_oracle(const Case& c, const Array& a, const Array& b, const Array& out) {
  const int64_t batches = std::max<int64_t>({1, c.batch_a, c.batch_b});
  const double eps = c.dtype == DType::f32 ? 6e-8 : 1.2e-16;
  int64_t bad = 0;
  for (int64_t q = 0; q < batches; ++q) {
    const int64_t oa = c.batch_a ? q * c.m * c.k : 0, ob = c.batch_b ? q * c.k * c.n : 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          const double x = element(a, oa + (c.ta ? l * c.m + i : i * c.k + l));
          const double y = element(b, ob + (c.tb ? j * c.k + l : l * c.n + j));
          sum += x * y;
          mag += std::abs(x * y);
        }
        const double got = element(out, q * c.m * c.n + i * c.n + j);
        if (std::abs(got - sum) > 2 * c.k * eps * mag + 1e-30 && bad++ < 3)
          ADD_FAILURE() << c.what << ": [" << q << "," << i << "," << j << "] = " << got
                        << ", the oracle says " << sum;
      }
  }
}

TEST(Determinism, MatMulBitsDoNotDependOnThreads) {
  const std::vector<Case> cases = {
      {"blocked, deep", 0, 0, 256, 784, 512, false, false, DType::f32},
      {"blocked, A^T (a weight gradient)", 0, 0, 784, 256, 512, true, false, DType::f32},
      {"blocked, B^T (an input gradient)", 0, 0, 256, 512, 784, false, true, DType::f32},
      {"blocked, both transposed", 0, 0, 200, 300, 260, true, true, DType::f32},
      {"blocked, many depth blocks", 0, 0, 96, 3000, 96, false, false, DType::f32},
      {"blocked f64", 0, 0, 160, 700, 300, false, false, DType::f64},
      {"folded batch (dense over a sequence)", 8, 0, 64, 300, 200, false, false, DType::f32},
      {"narrow (logits)", 0, 0, 512, 512, 10, false, false, DType::f32},
      {"narrow, transposed", 0, 0, 256, 512, 10, true, true, DType::f64},
      {"batched (attention scores)", 16, 16, 64, 32, 64, false, true, DType::f32},
      {"batched, shared B transposed", 12, 0, 96, 400, 128, true, false, DType::f32},
      {"i32", 4, 4, 40, 50, 60, false, false, DType::i32},
  };
  const int saved = intra_op_threads();
  for (const Case& c : cases) {
    const Shape as = shape_of(c.batch_a, c.ta ? c.k : c.m, c.ta ? c.m : c.k);
    const Shape bs = shape_of(c.batch_b, c.tb ? c.n : c.k, c.tb ? c.k : c.n);
    const Array a = random_values(c.dtype, as, 1), b = random_values(c.dtype, bs, 2);
    auto f = jit([&](const Tensor& x, const Tensor& y) { return matmul(x, y, c.ta, c.tb); });
    set_intra_op_threads(1);
    const Array one = f(a, b);
    expect_matches_oracle(c, a, b, one);
    for (int threads : {2, 3, 4}) {
      set_intra_op_threads(threads);
      EXPECT_TRUE(f(a, b).bit_equal(one)) << c.what << ": " << threads << " threads differ from 1";
    }
  }
  set_intra_op_threads(saved);
}

// Fused elementwise passes large enough to be split among threads: Adam's update (one pass
// with further results, rows of 512) and a long-row program (chunks, with a shorter last one).
TEST(Determinism, FusedPassBitsDoNotDependOnThreads) {
  const int saved = intra_op_threads();
  const Adam opt{.lr = 1e-2};
  const ArrayDict p{{"w", random_values(DType::f32, {784, 512}, 3)}},
      g{{"w", random_values(DType::f32, {784, 512}, 4)}};
  ArrayDict s = opt.init_state(p);
  s.set("m.w", random_values(DType::f32, {784, 512}, 5));
  auto adam = jit([&](const TensorDict& p, const TensorDict& g, const TensorDict& s) {
    auto [p2, s2] = opt.update(p, g, s);
    return std::tuple{p2, s2};
  });
  auto chain = jit([](const Tensor& x, const Tensor& y) {
    const Tensor z = tanh(x * 3.0 + y);
    return std::tuple{sqrt(abs(z - y)) / (abs(x) + 1.0), z};
  });
  const Array x = random_values(DType::f32, {3, 100003}, 6), y = random_values(DType::f32, {3, 100003}, 7);
  set_intra_op_threads(1);
  const auto [p1, s1] = adam(p, g, s);
  const auto [c1, z1] = chain(x, y);
  EXPECT_NE(adam.core().last_entry()->exe->plan_string().find("also writes"), std::string::npos);
  for (int threads : {2, 3, 4}) {
    set_intra_op_threads(threads);
    const auto [pt, st] = adam(p, g, s);
    EXPECT_TRUE(pt.at("w").bit_equal(p1.at("w"))) << threads << " threads";
    for (const char* k : {"m.w", "v.w"}) EXPECT_TRUE(st.at(k).bit_equal(s1.at(k))) << k << ", " << threads << " threads";
    const auto [ct, zt] = chain(x, y);
    EXPECT_TRUE(ct.bit_equal(c1) && zt.bit_equal(z1)) << threads << " threads";
  }
  set_intra_op_threads(saved);
}

}  // namespace

namespace examples {
namespace {

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

using fjit::testing::synthetic_images;

// Parameters and optimizer state after `steps` steps on 2 thread replicas whose kernels use
// `threads` intra-op threads each.
std::pair<ArrayDict, ArrayDict> train(const TrainOptions& o, int threads, int steps) {
  setenv("FJIT_INTRA_OP_THREADS", std::to_string(threads).c_str(), 1);
  Trainer t(Mesh::threads(2), o, synthetic_images(2 * o.batch_size, 9));
  unsetenv("FJIT_INTRA_OP_THREADS");
  for (int i = 0; i < steps; ++i) EXPECT_TRUE(t.step().has_value());
  return {t.params(), t.optimizer_state()};
}

class ModelDeterminism : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelDeterminism, TrainingBitsDoNotDependOnIntraOpThreads) {
  TrainOptions o;
  o.model = GetParam();
  o.layers = {784, 512, 512, 10};
  o.batch_size = o.model == "mlp" ? 256 : 64;
  o.dropout = o.model == "mlp" ? 0.0 : 0.1;
  o.lr = 1e-3;
  o.seed = 11;
  o.log_every = 0;
  o.epochs = 10;
  const auto [params1, state1] = train(o, 1, 3);
  const auto [params2, state2] = train(o, 2, 3);
  expect_bit_equal(params1, params2, o.model + " parameters, 1 vs 2 intra-op threads");
  expect_bit_equal(state1, state2, o.model + " optimizer state, 1 vs 2 intra-op threads");
}

INSTANTIATE_TEST_SUITE_P(Models, ModelDeterminism, ::testing::Values("mlp", "cnn", "vit"));

}  // namespace
}  // namespace examples
}  // namespace fjit
