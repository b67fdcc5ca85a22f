// A mesh with named axes and shard_map on it (parallel/shard_map.h), and the tensor-parallel
// layers (core/nn/tensor_parallel.h), on thread replicas. Oracles: plain host loops for the
// collectives, the unsplit layers (gelu_mlp, multi_head_attention, transformer_block) for
// the tensor-parallel ones, and 4-way data parallelism (pmap) for 2 x 2 training.
// Tolerance for f32 results against their unsplit oracle: 1e-5 of the oracle's largest
// magnitude (of a dict of gradients: of its largest entry); the sums are split into a
// different order, nothing else changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "fjit.h"
#include "tests/tensor_parallel_testing.h"

namespace fjit {
namespace {

constexpr double kRel = 1e-5;

using testing::random;
using testing::rel_err;

void expect_near_dict(const ArrayDict& got, const ArrayDict& want, const std::string& what) {
  testing::expect_near_dict(got, want, what, kRel);
}

Mesh grid() { return Mesh::threads({{"data", 2}, {"model", 2}}); }

TEST(MeshAxes, RowMajorCoordinatesAndGroups) {
  const std::vector<MeshAxis> axes{{"data", 2}, {"model", 3}};
  EXPECT_EQ(mesh_axes_size(axes, "t"), 6);
  EXPECT_EQ(mesh_coords(axes, 4), (std::vector<int>{1, 1}));
  // Replica 4 = (1, 1): on "model" it is in group 1 (data 1) at rank 1; on "data" in group 1
  // (model 1) at rank 1.
  EXPECT_EQ(mesh_axis_group(axes, 4, 1), (std::pair<int, int>{1, 1}));
  EXPECT_EQ(mesh_axis_group(axes, 5, 0), (std::pair<int, int>{2, 1}));
  EXPECT_THROW(mesh_axes_size({{"a", 2}, {"a", 2}}, "t"), std::invalid_argument);
  EXPECT_THROW(mesh_axes_size({{"a", 0}}, "t"), std::invalid_argument);
  EXPECT_THROW(Mesh::threads(std::vector<MeshAxis>{{"", 2}}), std::invalid_argument);
  Mesh m = grid();
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.axis_size("model"), 2);
  EXPECT_EQ(m.axis_index("data", 2), 1);
  EXPECT_EQ(m.axis_index("model", 2), 0);
  EXPECT_THROW(m.axis_size("batch"), std::invalid_argument);
  EXPECT_THROW(pmap(m, "batch", [](const Tensor& x) { return x; }), std::invalid_argument);  // shard_map's
}

// Every replica's coordinates and the axis sizes, as the trace and the plan see them.
TEST(ShardMap, AxisIndexAndSizeNameOneAxisOfTheGrid) {
  Mesh mesh = Mesh::threads({{"data", 2}, {"model", 3}});
  auto f = shard_map([](const Tensor& x) {
    EXPECT_EQ(axis_size("data"), 2);
    EXPECT_EQ(axis_size("model"), 3);
    Tensor d = cast(reshape(axis_index("data"), {1, 1}), DType::f32);
    Tensor m = cast(reshape(axis_index("model"), {1, 1}), DType::f32);
    return x + d * 10.0 + m;
  }, mesh, {{"data", "model"}}, {{"data", "model"}});
  Array y = f(Array::full(DType::f32, {2, 3}, 0.0));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(y.data<float>()[i * 3 + j], 10.0f * i + j);
}

// psum over one axis sums over the replicas that share the other coordinate only; pmean and
// all_gather too.
TEST(ShardMap, CollectivesRunOverTheNamedAxisOnly) {
  Mesh mesh = grid();
  const Array x = random({4, 6}, 1);
  auto f = shard_map([](const Tensor& xb) {  // xb [2, 3]: data splits rows, model columns
    return std::tuple{psum(xb, "model"), pmean(xb, "data"), all_gather(xb, "model", 1, true)};
  }, mesh, {{"data", "model"}}, {{"data", ""}, {"", "model"}, {"data", ""}});
  auto [s, m, g] = f(x);
  const float* px = x.data<float>();
  ASSERT_EQ(s.shape(), (Shape{4, 3}));
  ASSERT_EQ(m.shape(), (Shape{2, 6}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_NEAR(s.data<float>()[i * 3 + j], double(px[i * 6 + j]) + px[i * 6 + j + 3], 1e-6);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 6; ++j)
      EXPECT_NEAR(m.data<float>()[i * 6 + j], (double(px[i * 6 + j]) + px[(i + 2) * 6 + j]) / 2, 1e-6);
  EXPECT_EQ(rel_err(g, x), 0.0);  // the blocks gathered back: x itself
}

TEST(ShardMap, SpecsThatDoNotFitNameTheArgumentShapeAxisAndCallSite) {
  Mesh mesh = grid();
  auto f = shard_map([](const Tensor& x) { return x; }, mesh, {{"data", "model"}}, {{"data", "model"}});
  try {
    f(Array::full(DType::f32, {5, 4}, 1.0));
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string w = e.what();
    for (const char* part : {"argument 0", "[5,4]", "dimension 0", "'data' (size 2)", "shard_map_test.cc"})
      EXPECT_NE(w.find(part), std::string::npos) << part << " in: " << w;
  }
  auto g = shard_map([](const Tensor& x) { return x; }, mesh, {{"rows"}}, {{}});
  try {
    g(Array::full(DType::f32, {4}, 1.0));
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("names axis 'rows', which the mesh lacks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(shard_map([](const Tensor& x) { return x; }, Mesh::threads(2), {{}}, {{}}), std::invalid_argument);
}

using testing::block_mse;
using testing::tp_attention_spec;
using testing::tp_block_step;
using testing::tp_mlp_spec;

// Forward and gradients of a split layer on the 2 x 2 grid (batch over "data", weights over
// "model") against the unsplit layer under jit on the whole batch.
template <class Split, class Whole>
void expect_split_equals_whole(Split split, Whole whole, const ArrayDict& p_split, const ArrayDict& p_whole,
                               const ShardSpec& spec, const Array& x) {
  auto loss_of = [](const Tensor& y) { return sum(y * y) * 0.5; };
  auto sm = shard_map([&](const TensorDict& p, const Tensor& xb) {
    auto [loss, g] = value_and_grad([&](const TensorDict& q, const Tensor& xx) { return loss_of(split(q, xx)); })(p, xb);
    return std::tuple{split(p, xb), psum(loss, "data"), psum(g, "data")};
  }, grid(), {spec, {"data"}}, {{"data"}, {}, spec});
  auto [y, loss, g] = sm(p_split, x);
  auto ref = jit([&](const TensorDict& p, const Tensor& xx) {
    auto [l, gw] = value_and_grad([&](const TensorDict& q, const Tensor& xa) { return loss_of(whole(q, xa)); })(p, xx);
    return std::tuple{whole(p, xx), l, gw};
  });
  auto [y0, loss0, g0] = ref(p_whole, x);
  EXPECT_LE(rel_err(y, y0), kRel);
  EXPECT_LE(rel_err(loss, loss0), kRel);
  return expect_near_dict(g, g0, "gradient");
}

TEST(TensorParallel, MegatronMlpEqualsTheUnsplitMlpForwardAndGradients) {
  ArrayDict p;
  gelu_mlp_params(p, "mlp", 8, 12, 3);
  p["mlp/fc/b"] = random({12}, 4);
  p["mlp/proj/b"] = random({8}, 5);
  const Array x = random({6, 8}, 6);
  expect_split_equals_whole([](const TensorDict& q, const Tensor& xx) { return tp_gelu_mlp(q, "mlp", xx, "model"); },
                            [](const TensorDict& q, const Tensor& xx) { return gelu_mlp(q, "mlp", xx); }, p, p,
                            tp_mlp_spec("mlp"), x);
}

// Megatron's f costs nothing in the forward pass: the forward plan of the split MLP has one
// collective, g's all-reduce (f's psum is there for its gradient only).
TEST(TensorParallel, TheForwardPassOfTheSplitMlpHasOneAllReduce) {
  ArrayDict p;
  gelu_mlp_params(p, "mlp", 8, 12, 3);
  auto sm = shard_map([](const TensorDict& q, const Tensor& x) { return tp_gelu_mlp(q, "mlp", x, "model"); }, grid(),
                      {tp_mlp_spec("mlp"), {"data"}}, {{"data"}});
  sm(p, random({4, 8}, 2));
  int collectives = 0;
  for (const Node& n : sm.core().last_entry()->exe->graph->nodes()) collectives += op_kind(n.op) == OpKind::kCollective;
  EXPECT_EQ(collectives, 1);
}

TEST(TensorParallel, AttentionSplitOverHeadsEqualsMultiHeadAttentionForwardAndGradients) {
  MultiHeadAttentionOptions o;
  o.heads = 4;
  o.causal = true;
  ArrayDict p;
  multi_head_attention_params(p, "attn", 8, 7, o);
  p["attn/qkv/b"] = random({24}, 8);
  p["attn/out/b"] = random({8}, 9);
  const ArrayDict tp = tp_attention_params(p, "attn");
  ASSERT_TRUE(tp.contains("attn/k/w") && !tp.contains("attn/qkv/w"));
  const Array x = random({4, 5, 8}, 10);
  auto g_whole = [&](const ArrayDict& d) {
    // The oracle's gradient in tp_attention's names, to compare entry by entry.
    return tp_attention_params(d, "attn");
  };
  // Forward and loss against multi_head_attention; gradients converted to q/k/v names.
  auto loss_of = [](const Tensor& y) { return sum(y * y) * 0.5; };
  auto sm = shard_map([&](const TensorDict& q, const Tensor& xb) {
    auto fn = [&](const TensorDict& w, const Tensor& xx) { return tp_attention(w, "attn", xx, "model", o); };
    auto [loss, g] = value_and_grad([&](const TensorDict& w, const Tensor& xx) { return loss_of(fn(w, xx)); })(q, xb);
    return std::tuple{fn(q, xb), psum(loss, "data"), psum(g, "data")};
  }, grid(), {tp_attention_spec("attn"), {"data"}}, {{"data"}, {}, tp_attention_spec("attn")});
  auto [y, loss, g] = sm(tp, x);
  auto ref = jit([&](const TensorDict& q, const Tensor& xx) {
    auto fn = [&](const TensorDict& w, const Tensor& xa) { return multi_head_attention(w, "attn", xa, o); };
    auto [l, gw] = value_and_grad([&](const TensorDict& w, const Tensor& xa) { return loss_of(fn(w, xa)); })(q, xx);
    return std::tuple{fn(q, xx), l, gw};
  });
  auto [y0, loss0, g0] = ref(p, x);
  EXPECT_LE(rel_err(y, y0), kRel);
  EXPECT_LE(rel_err(loss, loss0), kRel);
  expect_near_dict(g, g_whole(g0), "gradient");
}

TEST(TensorParallel, HeadsThatTheAxisDoesNotDivideAreATraceErrorNamingTheLayer) {
  MultiHeadAttentionOptions o;
  o.heads = 3;
  ArrayDict p;
  multi_head_attention_params(p, "attn", 6, 1, o);
  auto sm = shard_map([&](const TensorDict& q, const Tensor& x) { return tp_attention(q, "attn", x, "model", o); },
                      grid(), {tp_attention_spec("attn"), {}}, {{}});
  try {
    sm(tp_attention_params(p, "attn"), random({1, 2, 6}, 1));
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("tp_attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("heads (3)"), std::string::npos) << e.what();
  }
}

// 2-way data x 2-way model parallel training of the block gives 4-way data parallelism's
// losses, step by step.
TEST(TensorParallel, BlockTrainedOnTwoByTwoMeshMatchesFourWayDataParallelLosses) {
  TransformerBlockOptions bo;
  bo.attention.heads = 4;
  bo.attention.causal = true;
  bo.mlp_hidden = 16;
  ArrayDict p;
  transformer_block_params(p, "blk", 8, 11, bo);
  const ArrayDict tp = tp_attention_params(p, "blk/attn");
  const Array x = random({8, 5, 8}, 12), target = random({8, 5, 8}, 13);
  constexpr double kLr = 0.5;
  constexpr int kSteps = 5;
  auto dp = pmap(Mesh::threads(4), "batch", [&](const TensorDict& q, const Tensor& xb, const Tensor& tb) {
    auto [loss, g] = value_and_grad([&](const TensorDict& w, const Tensor& xx, const Tensor& tt) {
      return block_mse(transformer_block(w, "blk", xx, bo), tt);
    })(q, xb, tb);
    g = pmean(g, "batch");
    TensorDict next;
    for (const auto& kv : q) next.set(kv.first, kv.second - g[kv.first] * kLr);
    return std::tuple{next, pmean(loss, "batch")};
  });
  auto tpx = tp_block_step(grid(), bo.attention, kLr);

  ArrayDict pd = p, pt = tp;
  for (int s = 0; s < kSteps; ++s) {
    auto [pd2, ld] = dp(pd, x, target);
    auto [pt2, lt] = tpx(pt, x, target);
    const double a = ld.item<float>(), b = lt.item<float>();
    EXPECT_LE(std::abs(a - b), kRel * std::abs(a)) << "step " << s << ": 4-way data " << a << ", 2x2 " << b;
    std::printf("step %d loss: 4-way data %.9g, 2 data x 2 model %.9g\n", s, a, b);
    pd = std::move(pd2);
    pt = std::move(pt2);
  }
}

// A check raised on one replica, on either axis, is reported by every replica at the same step.
TEST(ShardMapChecks, ACheckRaisedOnAnyReplicaOfTheGridIsReportedByAll) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const int raiser : {1, 2}) {  // (data 0, model 1) and (data 1, model 0)
    PmapOptions o;
    o.jit.checks = CheckMode::user;
    o.jit.policy = CheckPolicy::throw_error;
    auto f = shard_map([](const Tensor& s, const Tensor& xb) {
      Tensor local = sum(xb);
      check(isfinite(local), "block sum is {}", local);
      return std::tuple{s + psum(local, "model") + psum(local, "data"), xb};
    }, grid(), {{}, {"data", "model"}}, {{}, {"data", "model"}}, o);
    Array good = Array::full(DType::f32, {2, 2}, 1.0), state = Array::full(DType::f32, {}, 0.0);
    Array bad = good.clone();
    bad.data<float>()[raiser] = kNaN;  // replica r holds element (r / 2, r % 2)
    EXPECT_EQ(std::get<0>(f(state, good)).item<float>(), 4.0f);
    try {
      f(state, bad);
      ADD_FAILURE() << "no CheckError";
    } catch (const CheckError& e) {
      EXPECT_EQ(e.step(), 1);
      EXPECT_NE(std::string(e.what()).find("raised on replica " + std::to_string(raiser) + " of 4"), std::string::npos)
          << e.what();
    }
    // skip_step: every replica keeps its state (none of them updated it).
    o.jit.policy = CheckPolicy::skip_step;
    auto g = shard_map([](const TensorDict& st, const Tensor& xb) {
      Tensor local = sum(xb);
      check(isfinite(local), "block sum is {}", local);
      TensorDict next;
      next.set("s", st["s"] + psum(local, "model") + psum(local, "data"));
      return next;
    }, grid(), {{}, {"data", "model"}}, {{}}, o);
    ArrayDict st;
    st.set("s", state);
    EXPECT_EQ(g(st, good)["s"].item<float>(), 4.0f);
    EXPECT_EQ(g(st, bad)["s"].item<float>(), 0.0f);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(g.replica_outputs(r)[0].item<float>(), 0.0f) << "replica " << r;
    EXPECT_EQ(g(st, good)["s"].item<float>(), 4.0f);  // and the grid keeps working
  }
}

}  // namespace
}  // namespace fjit
