// LoRA (core/nn/lora.h): linear with an adapter against the host's x @ w + b + s (x @ A) @ B,
// add_lora's entries and its errors, merge_lora against the adapter, gradients with respect
// to the adapter alone against central differences, and an incomplete adapter's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/ir/convert.h"
#include "parallel/fjit.h"
#include "tests/nn_host_reference.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;
using testing::random_f64;

DecoderConfig tiny() {
  DecoderConfig c;
  c.vocab = 11;
  c.context = 6;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 1;
  c.rotary = true;
  c.tied_embeddings = false;
  c.attention_bias = false;
  c.norm = TransformerBlockOptions::Norm::kRmsNorm;
  c.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  return c;
}

Array ids() { return Array::from_vector<int32_t>({1, 4, 9, 2, 10, 0}, {1, 6}); }

Array logits_of(const ArrayDict& p, const DecoderConfig& c) {
  return jit([&c](const Params& q, const Tensor& x) { return decoder_logits(q, c, x); })(p, ids());
}

// Every lora_b drawn at random (add_lora makes them zero, which hides the adapter).
void randomize_b(ArrayDict& p, double scale) {
  uint64_t seed = 50;
  for (auto& [name, a] : p)
    if (name.size() > 7 && name.compare(name.size() - 7, 7, "/lora_b") == 0) {
      const Array r = random_f64(a.shape(), ++seed);
      Array b(a.dtype(), a.shape());
      for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(a.dtype(), b.raw(), i, scale * r.data<double>()[i]);
      a = b;
    }
}

TEST(Lora, LinearWithAnAdapterIsTheHostFormula) {
  ArrayDict p;
  p.set("fc/w", random_f64({5, 7}, 1));
  p.set("fc/b", random_f64({7}, 2));
  p.set("fc/lora_a", random_f64({5, 3}, 3));
  p.set("fc/lora_b", random_f64({3, 7}, 4));
  p.set("fc/lora_scale", Array::scalar(0.75));
  const Array x = random_f64({2, 4, 5}, 5);
  auto f = jit([](const Params& p, const Tensor& x) { return std::tuple{linear(p, "fc", x), linear(p, "fc", x, false)}; });
  auto [with_bias, without] = f(p, x);
  ASSERT_EQ(with_bias.shape(), (Shape{2, 4, 7}));
  const testing::Vec xv(x.data<double>(), x.data<double>() + x.size());
  const testing::Vec want = testing::host_linear(xv, 8, p, "fc", true), want_nb = testing::host_linear(xv, 8, p, "fc", false);
  for (int64_t i = 0; i < with_bias.size(); ++i) {
    ASSERT_NEAR(with_bias.data<double>()[i], want[i], 1e-13) << i;
    ASSERT_NEAR(without.data<double>()[i], want_nb[i], 1e-13) << i;
  }
  // An f32 adapter (add_lora's dtype) on an f64 layer is cast to f64.
  ArrayDict q = p;
  for (const char* part : {"lora_a", "lora_b", "lora_scale"}) {
    const Array& a = p.at(std::string("fc/") + part);
    Array f32(DType::f32, a.shape());
    for (int64_t i = 0; i < a.size(); ++i) f32.data<float>()[i] = static_cast<float>(a.at_as_double(i));
    q.set(std::string("fc/") + part, f32);
  }
  const Array mixed = jit([](const Params& p, const Tensor& x) { return linear(p, "fc", x); })(q, x);
  ASSERT_EQ(mixed.dtype(), DType::f64);
  const testing::Vec want_mixed = testing::host_linear(xv, 8, q, "fc", true);
  for (int64_t i = 0; i < mixed.size(); ++i) ASSERT_NEAR(mixed.data<double>()[i], want_mixed[i], 1e-12) << i;
}

TEST(Lora, AddLoraAddsZeroUpdatesToTheSelectedLayers) {
  const DecoderConfig c = tiny();
  ArrayDict p;
  decoder_params(p, c, 1);
  const Array base = logits_of(p, c);
  ArrayDict adapted = p;
  const std::vector<std::string> layers = add_lora(adapted, {.rank = 3, .alpha = 6, .targets = {"attn/qkv", "mlp/*"}, .seed = 7});
  EXPECT_EQ(layers, (std::vector<std::string>{"block0/attn/qkv", "block0/mlp/gate", "block0/mlp/up", "block0/mlp/down",
                                              "block1/attn/qkv", "block1/mlp/gate", "block1/mlp/up", "block1/mlp/down"}));
  EXPECT_EQ(adapted.size(), p.size() + 3 * layers.size());
  EXPECT_EQ(adapted.at("block0/attn/qkv/lora_a").shape(), (Shape{8, 3}));
  EXPECT_EQ(adapted.at("block0/attn/qkv/lora_b").shape(), (Shape{3, (2 + 2 * 1) * 4}));
  EXPECT_EQ(adapted.at("block1/mlp/down/lora_a").shape(), (Shape{32, 3}));
  EXPECT_EQ(adapted.at("block1/mlp/down/lora_scale").shape(), Shape{});
  EXPECT_EQ(adapted.at("block1/mlp/down/lora_scale").item<double>(), 2.0);
  EXPECT_FALSE(adapted.contains("block0/attn/out/lora_a"));
  EXPECT_FALSE(adapted.contains("head/lora_a"));
  for (const std::string& layer : layers) {
    const Array& a = adapted.at(layer + "/lora_a");
    EXPECT_EQ(a.dtype(), DType::f32);
    const double bound = 1 / std::sqrt(static_cast<double>(a.shape()[0]));
    double largest = 0;
    for (int64_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(a.at_as_double(i)));
    EXPECT_LE(largest, bound) << layer;
    EXPECT_GT(largest, bound / 4) << layer;
    for (int64_t i = 0; i < adapted.at(layer + "/lora_b").size(); ++i)
      ASSERT_EQ(adapted.at(layer + "/lora_b").at_as_double(i), 0.0) << layer;
  }
  EXPECT_FALSE(adapted.at("block0/mlp/up/lora_a").bit_equal(adapted.at("block1/mlp/up/lora_a")));
  // The same seed gives the same draw for a layer, whatever else is adapted.
  ArrayDict other = p;
  add_lora(other, {.rank = 3, .targets = {"block1/mlp/up", "head"}, .seed = 7});
  EXPECT_TRUE(other.at("block1/mlp/up/lora_a").bit_equal(adapted.at("block1/mlp/up/lora_a")));
  EXPECT_TRUE(other.contains("head/lora_a"));
  // B = 0: the adapted model is the base model.
  const Array same = logits_of(adapted, c);
  for (int64_t i = 0; i < base.size(); ++i) ASSERT_EQ(same.data<float>()[i], base.data<float>()[i]) << i;
  // The selection helpers.
  EXPECT_TRUE(is_lora_param("block0/attn/qkv/lora_scale"));
  EXPECT_FALSE(is_lora_param("block0/attn/qkv/w"));
  EXPECT_FALSE(is_lora_param("lora_a"));
  const ArrayDict adapter = lora_adapter(adapted);
  EXPECT_EQ(adapter.size(), 3 * layers.size());
  EXPECT_EQ(adapter.name(0), "block0/attn/qkv/lora_a");
}

TEST(Lora, MergedWeightsGiveTheAdaptersOutputs) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const DecoderConfig c = tiny();
    ArrayDict p;
    decoder_params(p, c, 2);
    if (dtype == DType::bf16)
      for (auto& [name, a] : p) {
        Array h(DType::bf16, a.shape());
        for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(DType::bf16, h.raw(), i, a.at_as_double(i));
        a = h;
      }
    const std::vector<std::string> names = p.names();
    const Array base = logits_of(p, c);
    add_lora(p, {.rank = 2, .alpha = 4, .targets = {"*"}, .seed = 3});
    ASSERT_TRUE(p.contains("head/lora_a")) << "'*' selects every linear layer, the head too";
    randomize_b(p, 0.05);
    const Array adapted = logits_of(p, c);
    ArrayDict merged = p;
    merge_lora(merged);
    EXPECT_EQ(merged.names(), names) << "merge_lora leaves exactly the base entries, in order";
    EXPECT_EQ(merged.at("block0/attn/qkv/w").dtype(), dtype);
    // The host's w + s A B, rounded once to w's dtype.
    const Array& w = p.at("block1/mlp/down/w");
    const Array &a = p.at("block1/mlp/down/lora_a"), &b = p.at("block1/mlp/down/lora_b");
    const int64_t r = a.shape()[1], out = w.shape()[1];
    Array want(dtype, {1});
    double v = 0;
    for (int64_t k = 0; k < r; ++k) v += a.at_as_double(3 * r + k) * b.at_as_double(k * out + 5);
    set_element_from_double(dtype, want.raw(), 0, w.at_as_double(3 * out + 5) + 2.0 * v);
    EXPECT_EQ(merged.at("block1/mlp/down/w").at_as_double(3 * out + 5), want.at_as_double(0));
    const Array folded = logits_of(merged, c);
    double scale = 0, worst = 0, moved = 0;
    for (int64_t i = 0; i < adapted.size(); ++i) {
      scale = std::max(scale, std::abs(adapted.at_as_double(i)));
      worst = std::max(worst, std::abs(adapted.at_as_double(i) - folded.at_as_double(i)));
      moved = std::max(moved, std::abs(adapted.at_as_double(i) - base.at_as_double(i)));
    }
    // bf16 rounds the merged weights once (relative 2^-9), f32 to its own precision.
    EXPECT_LE(worst, (dtype == DType::f32 ? 1e-5 : 2e-2) * std::max(1.0, scale)) << dtype_name(dtype);
    EXPECT_GT(moved, 1e-3 * scale) << "the adapter changed nothing";
  }
}

// Gradients with respect to a dict of lora_a and lora_b alone, the base weights (and the
// scales) passed as another argument: central differences in f64.
TEST(Lora, GradientsOfTheAdapterAloneMatchFiniteDifferences) {
  const TransformerBlockOptions o{.attention = {.heads = 2}, .mlp_hidden = 6, .gelu_tanh = true};
  ArrayDict base;
  transformer_block_params(base, "blk", 4, 1, o, Init::glorot_uniform, DType::f64);
  ArrayDict f32 = base;
  add_lora(f32, {.rank = 2, .targets = {"*"}});
  randomize_b(f32, 0.3);
  ArrayDict train;
  for (const auto& [name, a] : lora_adapter(f32)) {
    Array d(DType::f64, a.shape());
    for (int64_t i = 0; i < a.size(); ++i) d.data<double>()[i] = a.at_as_double(i);
    if (name.find("lora_scale") != std::string::npos) base.set(name, d);
    else train.set(name, d);
  }
  ASSERT_EQ(train.size(), 8u);  // qkv, out, fc, proj: lora_a and lora_b each
  const Array x = random_f64({1, 3, 4}, 9), r = random_f64({1, 3, 4}, 10);
  auto loss = [o](const Params& lora, const Params& frozen, const Tensor& x, const Tensor& r) {
    Params all = frozen;
    for (const auto& [name, t] : lora) all.set(name, t);
    return sum(mul(transformer_block(all, "blk", x, o), r));
  };
  auto value = jit(loss);
  auto [l, g] = jit([loss](const Params& lora, const Params& frozen, const Tensor& x, const Tensor& r) {
    return value_and_grad([&](const Params& w) { return loss(w, frozen, x, r); })(lora);
  })(train, base, x, r);
  EXPECT_NEAR(l.item<double>(), value(train, base, x, r).item<double>(), 1e-12);
  ASSERT_EQ(g.names(), train.names());
  const double h = 1e-6;
  for (const std::string& name : train.names()) {
    double largest = 0;
    for (int64_t i = 0; i < train.at(name).size(); ++i) {
      auto at = [&](double delta) {
        ArrayDict q = train;
        Array moved = train.at(name).clone();
        moved.data<double>()[i] += delta;
        q.set(name, moved);
        return value(q, base, x, r).item<double>();
      };
      const double fd = (at(h) - at(-h)) / (2 * h);
      largest = std::max(largest, std::abs(fd));
      ASSERT_NEAR(g.at(name).data<double>()[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
    }
    EXPECT_GT(largest, 1e-4) << name << ": a zero gradient tests nothing";
  }
}

TEST(Lora, AddLoraErrors) {
  ArrayDict p;
  linear_params(p, "enc/fc", 4, 5, 1);
  linear_params(p, "enc/proj", 5, 4, 2);
  std::string m = error_of<std::invalid_argument>([&] { add_lora(p, {.rank = 0, .targets = {"*"}}); });
  EXPECT_NE(m.find("rank must be >= 1"), std::string::npos) << m;
  m = error_of<std::invalid_argument>([&] { add_lora(p, {.targets = {"attn/qkv"}}); });
  EXPECT_NE(m.find("no linear layer matches the targets [attn/qkv]"), std::string::npos) << m;
  EXPECT_NE(m.find("enc/fc, enc/proj"), std::string::npos) << m;
  EXPECT_EQ(add_lora(p, {.targets = {"fc"}}), std::vector<std::string>{"enc/fc"});
  const size_t before = p.size();
  m = error_of<std::invalid_argument>([&] { add_lora(p, {.targets = {"enc/*"}}); });
  EXPECT_NE(m.find("layer 'enc/fc' already has a LoRA adapter"), std::string::npos) << m;
  EXPECT_EQ(p.size(), before) << "a refused add_lora changed the parameters";
}

TEST(Lora, IncompleteAdaptersAreErrorsNamingTheLayer) {
  ArrayDict p;
  linear_params(p, "enc/fc", 4, 5, 1);
  add_lora(p, {.rank = 2, .targets = {"*"}});
  const Array x = testing::random_f32({3, 4}, 1);
  for (const char* missing : {"enc/fc/lora_b", "enc/fc/lora_scale"}) {
    ArrayDict q;
    for (const auto& [name, a] : p) if (name != missing) q.set(name, a);
    const std::string m = error_of<TraceError>([&] {
      jit([](const Params& p, const Tensor& x) { return linear(p, "enc/fc", x); })(q, x);
    });
    EXPECT_NE(m.find("layer 'enc/fc' has a LoRA adapter"), std::string::npos) << m;
    EXPECT_NE(m.find(missing), std::string::npos) << m;
    EXPECT_NE(m.find("lora_test.cc"), std::string::npos) << m;
    const std::string merge = error_of<std::invalid_argument>([&] { merge_lora(q); });
    EXPECT_NE(merge.find("'enc/fc' has an incomplete LoRA adapter"), std::string::npos) << merge;
  }
  ArrayDict q = p;
  q.set("enc/fc/lora_b", zeros({3, 5}));  // rank 3 against lora_a's 2
  const std::string m = error_of<TraceError>([&] {
    jit([](const Params& p, const Tensor& x) { return linear(p, "enc/fc", x); })(q, x);
  });
  EXPECT_NE(m.find("layer 'enc/fc': a LoRA adapter of w [in, out] is lora_a [in, r]"), std::string::npos) << m;
  EXPECT_NE(error_of<std::invalid_argument>([&] { merge_lora(q); }).find("merge_lora: layer 'enc/fc'"), std::string::npos);
}

}  // namespace
}  // namespace fjit
