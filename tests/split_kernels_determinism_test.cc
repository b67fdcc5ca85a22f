// The kernels that split their work over the intra-op threads (core/kernels/split_work.h:
// patches and its adjoint, max pooling and its gradient, broadcasting elementwise kernels, plain-loop unary kernels and
// casts, row and column reductions, random bits, layout copies and concat) and the bf16 products whose
// row blocks follow the thread count give the same bits with 1, 2, 3 and 4 threads, and each
// matches its reference kernel (the op sweep harness). Every case is large enough to be split.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>

#include "core/base/isa.h"
#include "core/base/threads.h"
#include "core/kernels/split_work.h"
#include "tests/op_sweep_harness.h"

namespace fjit {
namespace {

sweep::Case make_case(Op op, ValueType out, std::vector<ValueType> ins) {
  sweep::Case c;
  c.op = op;
  c.out = std::move(out);
  c.ins = std::move(ins);
  return c;
}

// Runs c with 1 thread (against the reference), then with 2, 3, 4 threads, bit for bit.
void expect_bits_independent_of_threads(const sweep::Case& c, const std::string& what) {
  SCOPED_TRACE(what);
  int64_t elems = 0;  // elements read and written
  for (const ValueType& v : c.ins) elems += v.size();
  ASSERT_GE(elems + c.out.size(), kernels::kSplitElems) << "too small to be split";
  const int saved = intra_op_threads();
  set_intra_op_threads(1);
  const Array one = sweep::run_case(c);
  for (int threads : {2, 3, 4}) {
    set_intra_op_threads(threads);
    EXPECT_TRUE(sweep::run_case(c).bit_equal(one)) << threads << " threads differ from 1";
  }
  set_intra_op_threads(saved);
}

// The window attribute (core/ir/node.h) and the patches shape of an NHWC image.
struct Window {
  std::vector<int64_t> attr;
  Shape cols;
};
Window window(const Shape& img, int64_t k, int64_t stride, int64_t pad_lo, int64_t pad_hi) {
  const int64_t oh = (img[1] + pad_lo + pad_hi - k) / stride + 1;
  const int64_t ow = (img[2] + pad_lo + pad_hi - k) / stride + 1;
  return {{k, k, stride, stride, 1, 1, pad_lo, pad_hi, pad_lo, pad_hi}, {img[0], oh, ow, k * k * img[3]}};
}

TEST(SplitKernelsDeterminism, WindowOps) {
  struct G {
    const char* what;
    Shape img;
    int64_t k, stride, pad_lo, pad_hi;
    DType t;
  };
  const G geometries[] = {
      {"conv 3x3 SAME, 32-byte runs", {6, 28, 28, 8}, 3, 1, 1, 1, DType::f32},
      {"conv 5x5 SAME, one channel", {16, 28, 28, 1}, 5, 1, 2, 2, DType::f32},
      {"conv 3x3 VALID, 3 channels", {30, 20, 20, 3}, 3, 1, 0, 0, DType::f32},
      {"conv 3x3 SAME f64", {12, 24, 24, 4}, 3, 1, 1, 1, DType::f64},
      {"2x2 pooling", {8, 28, 28, 32}, 2, 2, 0, 0, DType::f32},
      {"2x2 pooling missing a row and column", {8, 29, 29, 32}, 2, 2, 0, 0, DType::f32},
      {"3x3 stride-2 windows that overlap", {8, 29, 29, 16}, 3, 2, 1, 1, DType::f32},
  };
  for (const G& g : geometries) {
    const Window w = window(g.img, g.k, g.stride, g.pad_lo, g.pad_hi);
    sweep::Case p = make_case(Op::Patches, {g.t, w.cols}, {{g.t, g.img}});
    p.attrs.window = w.attr;
    p.attrs.scalar = -3;
    expect_bits_independent_of_threads(p, std::string("patches, ") + g.what);
    sweep::Case a = make_case(Op::PatchesAdjoint, {g.t, g.img}, {{g.t, w.cols}});
    a.attrs.window = w.attr;
    expect_bits_independent_of_threads(a, std::string("patches_adjoint, ") + g.what);
  }
  const G pools[] = {
      {"2x2 pooling", {16, 28, 28, 32}, 2, 2, 0, 0, DType::f32},
      {"2x2 pooling missing a row and column", {16, 29, 29, 32}, 2, 2, 0, 0, DType::f32},
      {"3x3 stride-2 windows that overlap", {16, 29, 29, 24}, 3, 2, 1, 1, DType::f32},
      {"2x2 pooling f64", {12, 28, 28, 32}, 2, 2, 0, 0, DType::f64},
  };
  for (const G& g : pools) {
    const Window w = window(g.img, g.k, g.stride, g.pad_lo, g.pad_hi);
    const Shape pooled{g.img[0], w.cols[1], w.cols[2], g.img[3]};
    sweep::Case m = make_case(Op::MaxPool, {g.t, pooled}, {{g.t, g.img}});
    m.attrs.window = w.attr;
    expect_bits_independent_of_threads(m, std::string("max_pool, ") + g.what);
    sweep::Case mg = make_case(Op::MaxPoolGrad, {g.t, g.img}, {{g.t, pooled}, {g.t, g.img}});
    mg.attrs.window = w.attr;
    expect_bits_independent_of_threads(mg, std::string("max_pool_grad, ") + g.what);
  }
}

TEST(SplitKernelsDeterminism, BroadcastingElementwise) {
  const DType f = DType::f32;
  struct B {
    const char* what;
    Op op;
    DType t;
    Shape out, a, b;
  };
  const B cases[] = {
      {"add, same shape (one row)", Op::Add, f, {300001}, {300001}, {300001}},
      {"mul by a scalar (one row)", Op::Mul, f, {300001}, {300001}, {}},
      {"sub, row broadcast", Op::Sub, f, {2000, 200}, {2000, 200}, {200}},
      {"div, column broadcast", Op::Div, f, {2000, 200}, {2000, 200}, {2000, 1}},
      {"maximum, column by row", Op::Maximum, f, {700, 500}, {700, 1}, {500}},
      {"add, rank 3", Op::Add, f, {40, 100, 100}, {40, 1, 100}, {40, 100, 100}},
      {"mul, rank 3, short rows", Op::Mul, f, {200, 50, 30}, {200, 50, 30}, {50, 1}},
      {"add f64, one row", Op::Add, DType::f64, {200001}, {200001}, {200001}},
      {"pow, one row (not cut)", Op::Pow, f, {300001}, {300001}, {}},
      {"sub i32, row broadcast", Op::Sub, DType::i32, {1000, 300}, {1000, 300}, {300}},
      {"gt, row broadcast", Op::Gt, f, {600, 500}, {600, 500}, {500}},
      {"eq, one row", Op::Eq, DType::i32, {300001}, {300001}, {300001}},
  };
  for (const B& c : cases) {
    const bool cmp = c.op == Op::Gt || c.op == Op::Eq;
    sweep::Case k = make_case(c.op, {cmp ? DType::boolean : c.t, c.out}, {{c.t, c.a}, {c.t, c.b}});
    if (c.op == Op::Pow) k.domain = sweep::Domain::positive;
    if (c.op == Op::Div) k.domain = sweep::Domain::nonzero;
    expect_bits_independent_of_threads(k, c.what);
  }
  sweep::Case s = make_case(Op::Select, {f, {900, 400}},
                            {{DType::boolean, {900, 400}}, {f, {900, 400}}, {f, {400}}});
  expect_bits_independent_of_threads(s, "select, row broadcast");
  sweep::Case s1 = make_case(Op::Select, {f, {300001}}, {{DType::boolean, {300001}}, {f, {300001}}, {f, {}}});
  expect_bits_independent_of_threads(s1, "select, one row");
}

TEST(SplitKernelsDeterminism, UnaryLoopsAndCasts) {
  const Shape s{300001};
  expect_bits_independent_of_threads(make_case(Op::Relu, {DType::f32, s}, {{DType::f32, s}}), "relu");
  expect_bits_independent_of_threads(make_case(Op::Sign, {DType::f64, s}, {{DType::f64, s}}), "sign f64");
  expect_bits_independent_of_threads(make_case(Op::Cast, {DType::bf16, s}, {{DType::f32, s}}), "cast f32 -> bf16");
  expect_bits_independent_of_threads(make_case(Op::Cast, {DType::f32, s}, {{DType::bf16, s}}), "cast bf16 -> f32");
  expect_bits_independent_of_threads(make_case(Op::Cast, {DType::i32, s}, {{DType::f32, s}}), "cast f32 -> i32");
}

TEST(SplitKernelsDeterminism, RandomBits) {
  for (int64_t n : {int64_t{300001}, int64_t{262146}}) {  // the last block of 4 words cut short, or whole
    sweep::Case c = make_case(Op::RandomBits, {DType::u32, {n}}, {{DType::u32, {2}}});
    c.attrs.index = 1;
    expect_bits_independent_of_threads(c, "random_bits");
  }
}

// bf16 products whose row blocks follow the thread count and whose op(B) is packed by all
// threads in depth blocks (core/kernels/gemm/matmul_bf16.cc): weight gradients A^T B of a few
// hundred rows and a deep K, and products of fewer row blocks than threads, whose columns are
// split too (64 x 288; on the AMX tiles also 288 x 64, computed transposed); on the AMX tiles
// (where the CPU has them), the AVX512_BF16 kernels and the AVX2 widening path.
TEST(SplitKernelsDeterminism, Bf16ProductsWhoseBlocksFollowTheThreads) {
  const Isa before = active_isa();
  const bool amx_before = active_amx_bf16();
  struct Path { Isa isa; bool amx; };
  for (const Path path : {Path{Isa::avx2, false}, Path{Isa::avx512, false}, Path{Isa::avx512, true}}) {
    set_isa_limit(path.isa);
    set_amx_allowed(path.amx);
    if (path.amx && !active_amx_bf16()) continue;
    for (const auto& [m, k, n, tb] : {std::array<int64_t, 4>{288, 3000, 64, 0}, {300, 2001, 40, 1}, {9, 4000, 32, 0},
                                      {64, 2000, 288, 0}}) {
      const Shape bs = tb ? Shape{n, k} : Shape{k, n};
      sweep::Case c = make_case(Op::MatMul, {DType::f32, {m, n}}, {{DType::bf16, {k, m}}, {DType::bf16, bs}});
      c.attrs.trans_a = true;
      c.attrs.trans_b = tb != 0;
      c.tol = 1e-4;
      const int saved = intra_op_threads();
      set_intra_op_threads(1);
      const Array one = sweep::run_case(c);
      for (int threads : {2, 3, 4}) {
        set_intra_op_threads(threads);
        EXPECT_TRUE(sweep::run_case(c).bit_equal(one))
            << isa_name(active_isa()) << (active_amx_bf16() ? " amx" : "") << " M,K,N=" << m << "," << k << ","
            << n << ": " << threads << " threads differ from 1";
      }
      set_intra_op_threads(saved);
    }
  }
  set_isa_limit(before);
  set_amx_allowed(amx_before);
}

TEST(SplitKernelsDeterminism, LayoutCopies) {
  const DType f = DType::f32;
  auto transpose = [&](Shape in, Shape out, std::vector<int64_t> perm) {
    sweep::Case c = make_case(Op::Transpose, {f, std::move(out)}, {{f, std::move(in)}});
    c.attrs.axes = std::move(perm);
    return c;
  };
  expect_bits_independent_of_threads(transpose({8, 256, 6, 64}, {8, 6, 256, 64}, {0, 2, 1, 3}), "transpose, heads");
  expect_bits_independent_of_threads(transpose({30, 200, 40}, {30, 40, 200}, {0, 2, 1}), "transpose, tiles");
  expect_bits_independent_of_threads(transpose({700, 500}, {500, 700}, {1, 0}), "transpose, one 2-D tile walk");
  sweep::Case slice = make_case(Op::Slice, {f, {2048, 384}}, {{f, {2048, 1152}}});
  slice.attrs.starts = {0, 384};
  slice.attrs.limits = {2048, 768};
  slice.attrs.steps = {1, 1};
  expect_bits_independent_of_threads(slice, "slice of columns");
  sweep::Case strided = make_case(Op::Slice, {f, {1000, 300}}, {{f, {1000, 600}}});
  strided.attrs.starts = {0, 1};
  strided.attrs.limits = {1000, 600};
  strided.attrs.steps = {1, 2};
  expect_bits_independent_of_threads(strided, "slice with a step");
  expect_bits_independent_of_threads(make_case(Op::BroadcastTo, {f, {3000, 200}}, {{f, {3000, 1}}}), "broadcast_to");
  sweep::Case concat = make_case(Op::Concat, {f, {2048, 1152}}, {{f, {2048, 384}}, {f, {2048, 384}}, {f, {2048, 384}}});
  concat.attrs.axis = 1;
  expect_bits_independent_of_threads(concat, "concat along the last axis");
}

TEST(SplitKernelsDeterminism, ColumnReductions) {
  struct R {
    const char* what;
    Op op;
    DType t;
    Shape in;
    std::vector<int64_t> axes;
  };
  const R cases[] = {
      {"max over pooling taps", Op::ReduceMax, DType::f32, {20000, 4, 32}, {1}},
      {"sum over a middle axis", Op::ReduceSum, DType::f32, {500, 64, 40}, {1}},
      {"min over a middle axis f64", Op::ReduceMin, DType::f64, {300, 30, 40}, {1}},
      {"sum over a long middle axis", Op::ReduceSum, DType::f32, {8, 4000, 40}, {1}},
      {"sum over the first axis, column tiles", Op::ReduceSum, DType::f32, {300, 9000}, {0}},
      {"max over the first axis, column tiles", Op::ReduceMax, DType::f32, {300, 9000}, {0}},
      {"sum over the first axis f64, column tiles", Op::ReduceSum, DType::f64, {200, 5000}, {0}},
      {"sum of rows", Op::ReduceSum, DType::f32, {2048, 384}, {1}},
      {"max of short rows", Op::ReduceMax, DType::f32, {40000, 10}, {1}},
  };
  for (const R& c : cases) {
    Shape out;
    for (size_t d = 0; d < c.in.size(); ++d)
      if (std::find(c.axes.begin(), c.axes.end(), static_cast<int64_t>(d)) == c.axes.end()) out.push_back(c.in[d]);
    sweep::Case k = make_case(c.op, {c.t, out}, {{c.t, c.in}});
    k.attrs.axes = c.axes;
    k.tol = 1e-4;  // the fast kernel folds the rows in order: f32 error grows with the row count
    // The outputs alone are small: count the input.
    int64_t elems = 1;
    for (int64_t e : c.in) elems *= e;
    ASSERT_GE(elems, kernels::kSplitElems) << c.what;
    const int saved = intra_op_threads();
    set_intra_op_threads(1);
    const Array one = sweep::run_case(k);
    for (int threads : {2, 3, 4}) {
      set_intra_op_threads(threads);
      EXPECT_TRUE(sweep::run_case(k).bit_equal(one)) << c.what << ": " << threads << " threads differ from 1";
    }
    set_intra_op_threads(saved);
  }
}

}  // namespace
}  // namespace fjit
