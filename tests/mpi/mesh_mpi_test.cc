// A mesh with named axes over MPI ranks (MPI_Comm_split groups per axis), run with 2, 3 and 4
// ranks: shard_map's collectives over each axis, the Megatron MLP's gradients and a few
// training steps of the tensor-parallel transformer block give the same bits as the same
// grid of thread replicas (which tests/shard_map_test.cc checks against host loops, the
// unsplit layers and 4-way data parallelism), and so does the language model's training,
// by SGD and by AdamW with clipping to the mesh-wide gradient norm, which also gives data
// parallelism's losses (AdamW: the LM's own data-parallel step's losses and norms).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "fjit.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/tensor_parallel_testing.h"

namespace fjit {
namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// The grids this job's ranks make: N x 1, and 1 x N up to four ranks; 2 x 2 with four ranks,
// 2 x 4 and 4 x 2 with eight (the model axis stays a divisor of the 12 heads).
std::vector<std::vector<MeshAxis>> grids() {
  const int n = world_size();
  std::vector<std::vector<MeshAxis>> g{{{"data", n}, {"model", 1}}};
  if (n <= 4) g.push_back({{"data", 1}, {"model", n}});
  if (n == 4) g.push_back({{"data", 2}, {"model", 2}});
  if (n == 8) g.push_back({{"data", 2}, {"model", 4}}), g.push_back({{"data", 4}, {"model", 2}});
  return g;
}

Array ramp(const Shape& s, double scale) {
  Array a(DType::f32, s);
  for (int64_t i = 0; i < a.size(); ++i) a.data<float>()[i] = static_cast<float>(scale * ((i * 7919) % 97 - 48) / 97.0);
  return a;
}

void expect_same_bits(const Array& a, const Array& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << what;
}

auto collectives_on(const Mesh& mesh) {
  return shard_map([](const Tensor& xb) {
    Tensor i = reshape(cast(axis_index("data"), DType::f32) * 2.0 + cast(axis_index("model"), DType::f32), {1, 1});
    return std::tuple{psum(xb, "model") + i, pmean(xb, "data"), all_gather(xb, "model", 1, true)};
  }, mesh, {{"data", "model"}}, {{"data", ""}, {"", "model"}, {"data", ""}});
}

TEST(MeshMpi, CollectivesOverEachAxisMatchThreadReplicas) {
  for (const auto& axes : grids()) {
    const Array x = ramp({24, 12}, 1.0);
    auto on_mpi = collectives_on(Mesh::mpi(axes));
    auto on_threads = collectives_on(Mesh::threads(axes));
    auto [s, m, g] = on_mpi(x);
    auto [s0, m0, g0] = on_threads(x);
    expect_same_bits(s, s0, "psum over model");
    expect_same_bits(m, m0, "pmean over data");
    expect_same_bits(g, g0, "all_gather over model");
    expect_same_bits(g, x, "all_gather gives x back");
  }
}

TEST(MeshMpi, MegatronMlpGradientsMatchThreadReplicas) {
  ArrayDict p;
  gelu_mlp_params(p, "mlp", 8, 24, 3);
  p["mlp/proj/b"] = ramp({8}, 0.1);
  const ShardSpec spec =
      ShardSpec::dict({{"mlp/fc/w", {"", "model"}}, {"mlp/fc/b", {"model"}}, {"mlp/proj/w", {"model", ""}}});
  auto step = [&](const Mesh& mesh) {
    return shard_map([](const TensorDict& q, const Tensor& xb) {
      auto [loss, g] = value_and_grad([](const TensorDict& w, const Tensor& xx) {
        Tensor y = tp_gelu_mlp(w, "mlp", xx, "model");
        return sum(y * y);
      })(q, xb);
      return std::tuple{psum(loss, "data"), psum(g, "data")};
    }, mesh, {spec, {"data"}}, {{}, spec});
  };
  for (const auto& axes : grids()) {
    const Array x = ramp({24, 8}, 1.0);
    auto on_mpi = step(Mesh::mpi(axes));
    auto on_threads = step(Mesh::threads(axes));
    auto [l, g] = on_mpi(p, x);
    auto [l0, g0] = on_threads(p, x);
    expect_same_bits(l, l0, "loss");
    for (const auto& kv : g0) expect_same_bits(g[kv.first], kv.second, kv.first.c_str());
  }
}

TEST(MeshMpi, TensorParallelBlockTrainingMatchesThreadReplicas) {
  TransformerBlockOptions bo;
  bo.attention.heads = 12;  // a multiple of every model axis here (1 to 4)
  bo.attention.causal = true;
  bo.mlp_hidden = 24;
  ArrayDict p;
  transformer_block_params(p, "blk", 24, 5, bo);
  const ArrayDict start = tp_attention_params(p, "blk/attn");
  const Array x = ramp({24, 3, 24}, 1.0), target = ramp({24, 3, 24}, -0.5);
  for (const auto& axes : grids()) {
    auto on_mpi = testing::tp_block_step(Mesh::mpi(axes), bo.attention, 0.5);
    auto on_threads = testing::tp_block_step(Mesh::threads(axes), bo.attention, 0.5);
    ArrayDict pm = start, pt = start;
    for (int step = 0; step < 3; ++step) {
      auto [pm2, lm] = on_mpi(pm, x, target);
      auto [pt2, lt] = on_threads(pt, x, target);
      expect_same_bits(lm, lt, "loss");
      pm = std::move(pm2);
      pt = std::move(pt2);
    }
    for (const auto& kv : pt) expect_same_bits(pm[kv.first], kv.second, kv.first.c_str());
  }
}

// The language model (Llama's style, grouped-query, and GPT's) trained on each grid whose model
// axis divides its kv heads: the same bits as the same grid of thread replicas, and the losses
// of data parallelism over all the ranks (thread replicas, pmap) within 1e-5 relative.
TEST(MeshMpi, LanguageModelTrainingMatchesThreadReplicasAndDataParallelism) {
  DecoderConfig llama;
  llama.vocab = 32;
  llama.context = 4;
  llama.dim = 24;
  llama.layers = 1;
  llama.heads = 12;
  llama.kv_heads = 6;
  llama.mlp_hidden = 24;
  llama.rotary = true;
  llama.norm = TransformerBlockOptions::Norm::kRmsNorm;
  llama.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  llama.attention_bias = false;
  llama.tied_embeddings = false;
  DecoderConfig gpt = llama;
  gpt.rotary = false;
  gpt.norm = TransformerBlockOptions::Norm::kLayerNorm;
  gpt.mlp = TransformerBlockOptions::Mlp::kGelu;
  gpt.attention_bias = true;
  gpt.tied_embeddings = true;
  gpt.kv_heads = 0;
  const Array ids = testing::token_ids(24, 4, 32, 1), labels = testing::token_ids(24, 4, 32, 2);
  for (const DecoderConfig& c : {llama, gpt}) {
    ArrayDict p;
    decoder_params(p, c, 3);
    auto data_parallel = testing::lm_data_parallel_step(Mesh::threads(world_size()), c, 0.5);
    for (const auto& axes : grids()) {
      if ((c.kv_heads > 0 ? c.kv_heads : c.heads) % axes[1].size != 0) continue;  // kv heads over the model axis
      auto on_mpi = testing::lm_tensor_parallel_step(Mesh::mpi(axes), c, 0.5);
      auto on_threads = testing::lm_tensor_parallel_step(Mesh::threads(axes), c, 0.5);
      ArrayDict pm = tp_decoder_params(p, c), pt = pm, pd = p;
      for (int step = 0; step < 3; ++step) {
        auto [pm2, lm] = on_mpi(pm, ids, labels);
        auto [pt2, lt] = on_threads(pt, ids, labels);
        auto [pd2, ld] = data_parallel(pd, ids, labels);
        expect_same_bits(lm, lt, "loss");
        EXPECT_NEAR(lm.item<float>(), ld.item<float>(), 1e-5 * std::abs(ld.item<float>()))
            << c.describe() << ", step " << step << ", data " << axes[0].size << " x model " << axes[1].size;
        pm = std::move(pm2);
        pt = std::move(pt2);
        pd = std::move(pd2);
      }
      for (const auto& kv : pt) expect_same_bits(pm[kv.first], kv.second, kv.first.c_str());
    }
  }
}

// AdamW with weight decay and a clip that binds (parallel/train/tensor_parallel_update.h):
// the same bits as the grid of thread replicas, and the LM's own data-parallel step's losses
// and gradient norms over all the ranks' replicas (threads) within 1e-5 relative.
TEST(MeshMpi, LanguageModelAdamWTrainingMatchesThreadReplicasAndTheLmStep) {
  DecoderConfig c;
  c.vocab = 32;
  c.context = 4;
  c.dim = 24;
  c.layers = 1;
  c.heads = 12;
  c.kv_heads = 6;
  c.rotary = true;
  c.norm = TransformerBlockOptions::Norm::kRmsNorm;
  c.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  c.attention_bias = false;
  const lm::LmStepFn fn{.model = c,
                        .optimizer = AdamW{.weight_decay = 0.1},
                        .schedule = Schedule::constant(3e-3),
                        .clip_grad_norm = 0.25,
                        .groups = {{.name = "no_decay", .patterns = {"*/g"}, .weight_decay = 0.0}}};
  const Array ids = testing::token_ids(24, 4, 32, 1), labels = testing::token_ids(24, 4, 32, 2);
  ArrayDict p;
  decoder_params(p, c, 3);
  auto data_parallel = lm::make_lm_step(Mesh::threads(world_size()), fn, PmapOptions{});
  for (const auto& axes : grids()) {
    if (c.kv_heads % axes[1].size != 0) continue;
    SCOPED_TRACE(::testing::Message() << "data " << axes[0].size << " x model " << axes[1].size);
    auto on_mpi = testing::lm_tensor_parallel_adamw_step(Mesh::mpi(axes), fn);
    auto on_threads = testing::lm_tensor_parallel_adamw_step(Mesh::threads(axes), fn);
    ArrayDict pm = tp_decoder_params(p, c), sm = fn.optimizer.init_state(pm), pt = pm, st = sm, pd = p,
              sd = fn.optimizer.init_state(p);
    for (int step = 0; step < 3; ++step) {
      const Array t = Array::scalar<int32_t>(step);
      auto [pm2, sm2, lm, nm] = on_mpi(pm, sm, ids, labels, t);
      auto [pt2, st2, lt, nt] = on_threads(pt, st, ids, labels, t);
      auto [pd2, sd2, ld, nd] = data_parallel(pd, sd, ids, labels, t);
      expect_same_bits(lm, lt, "loss");
      expect_same_bits(nm, nt, "norm");
      EXPECT_NEAR(lm.item<float>(), ld.item<float>(), 1e-5 * std::abs(ld.item<float>())) << "step " << step;
      EXPECT_NEAR(nm.item<float>(), nd.item<float>(), 1e-5 * std::abs(nd.item<float>())) << "step " << step;
      EXPECT_GT(nd.item<float>(), 0.25f) << "step " << step << ": the clip does not bind";
      pm = std::move(pm2), sm = std::move(sm2), pt = std::move(pt2), st = std::move(st2);
      pd = std::move(pd2), sd = std::move(sd2);
    }
    for (const auto& kv : pt) expect_same_bits(pm[kv.first], kv.second, kv.first.c_str());
  }
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  static fjit::Mesh mesh = fjit::Mesh::mpi(&argc, &argv);  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(mesh.first_replica() == 0);
}
