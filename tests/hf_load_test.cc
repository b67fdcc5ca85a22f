// core/hf loading: GPT-2 and Llama directories (tied and untied, f32 and bf16, sharded) read into
// fjit names and layouts, element by element; every load error names the file and the tensor or field.
#include "tests/hf_fixtures.h"

namespace fjit::hf {
namespace {

using namespace fixtures;

TEST_F(HfTest, Gpt2TiedWithPrefixLoadsEveryTensorAsStored) {
  HfDir h = gpt2_dir("transformer.", true);
  h.add("transformer.h.0.attn.bias", {1, 1, T, T}, DType::f32);  // a causal-mask buffer: ignored
  h.add("lm_head.weight", {V, D}, DType::f32);                   // tied: present and ignored
  h.write(path("m"), gpt2_config(true));
  const HfModel m = load_hf_model(path("m"));
  EXPECT_EQ(m.architecture, Architecture::kGpt2);
  const DecoderConfig& c = m.config;
  EXPECT_EQ(c.vocab, V);
  EXPECT_EQ(c.context, T);
  EXPECT_EQ(c.dim, D);
  EXPECT_EQ(c.layers, L);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.mlp_hidden, F);
  EXPECT_TRUE(c.gelu_tanh);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.rotary);
  EXPECT_EQ(m.config_json, gpt2_config(true));
  // decoder_params' names and order.
  ArrayDict fresh;
  decoder_params(fresh, c, 1);
  EXPECT_EQ(names_of(m.params), names_of(fresh));
  std::map<std::string, std::string> hf = {{"tok/table", "wte.weight"}, {"pos/table", "wpe.weight"},
                                           {"norm/g", "ln_f.weight"}, {"norm/b", "ln_f.bias"}};
  for (int i = 0; i < L; ++i)
    for (auto [f, n] : std::map<std::string, std::string>{
             {"norm1/g", "ln_1.weight"}, {"norm1/b", "ln_1.bias"}, {"attn/qkv/w", "attn.c_attn.weight"},
             {"attn/qkv/b", "attn.c_attn.bias"}, {"attn/out/w", "attn.c_proj.weight"},
             {"attn/out/b", "attn.c_proj.bias"}, {"norm2/g", "ln_2.weight"}, {"norm2/b", "ln_2.bias"},
             {"mlp/fc/w", "mlp.c_fc.weight"}, {"mlp/fc/b", "mlp.c_fc.bias"},
             {"mlp/proj/w", "mlp.c_proj.weight"}, {"mlp/proj/b", "mlp.c_proj.bias"}})
      hf[fmt::format("block{}/{}", i, f)] = fmt::format("h.{}.{}", i, n);
  ASSERT_EQ(hf.size(), m.params.size());
  for (const auto& [name, a] : m.params) {
    EXPECT_EQ(a.dtype(), DType::f32);
    EXPECT_EQ(a.shape(), fresh.at(name).shape()) << name;
    expect_same(a, h, "transformer." + hf.at(name));  // Conv1D [in, out]: no transpose
  }
  EXPECT_NE(describe(m).find("gpt2"), std::string::npos);
}

TEST_F(HfTest, Gpt2UntiedWithoutPrefixTransposesTheHead) {
  const HfDir h = gpt2_dir("", false);
  h.write(path("m"), gpt2_config(false, R"(, "activation_function": "gelu")"));
  const HfModel m = load_hf_model(path("m"));
  EXPECT_FALSE(m.config.tied_embeddings);
  EXPECT_FALSE(m.config.gelu_tanh);
  expect_same(m.params.at("block1/mlp/fc/w"), h, "h.1.mlp.c_fc.weight");
  ASSERT_EQ(m.params.at("head/w").shape(), (Shape{D, V}));
  expect_transposed(m.params.at("head/w"), h, "lm_head.weight");
  EXPECT_EQ(m.params.names().back(), "head/w");
}

TEST_F(HfTest, LlamaGqaBf16ConcatenatesAndTransposes) {
  HfDir h = llama_dir(true, false, DType::bf16);
  h.add("model.layers.1.self_attn.rotary_emb.inv_freq", {DH / 2}, DType::f32);  // a buffer: ignored
  h.write(path("m"), llama_config(true, false));
  const HfModel m = load_hf_model(path("m"));
  const DecoderConfig& c = m.config;
  EXPECT_EQ(m.architecture, Architecture::kLlama);
  EXPECT_EQ(c.heads, H);
  EXPECT_EQ(c.kv_heads, KV);
  EXPECT_EQ(c.mlp_hidden, F);
  EXPECT_TRUE(c.rotary);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.norm, TransformerBlockOptions::Norm::kRmsNorm);
  EXPECT_EQ(c.mlp, TransformerBlockOptions::Mlp::kSwiglu);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  std::vector<std::string> expected = {"tok/table"};
  for (int i = 0; i < L; ++i)
    for (const char* n : {"norm1/g", "attn/qkv/w", "attn/qkv/b", "attn/out/w", "attn/out/b", "norm2/g",
                          "mlp/gate/w", "mlp/up/w", "mlp/down/w"})
      expected.push_back(fmt::format("block{}/{}", i, n));
  expected.insert(expected.end(), {"norm/g", "head/w"});
  EXPECT_EQ(names_of(m.params), expected);
  for (const auto& [name, a] : m.params) EXPECT_EQ(a.dtype(), DType::bf16) << name;

  const int64_t q = H * DH, kv = KV * DH;
  for (int layer = 0; layer < L; ++layer) {
    const std::string p = fmt::format("model.layers.{}.", layer), b = fmt::format("block{}/", layer);
    const Array& w = m.params.at(b + "attn/qkv/w");
    ASSERT_EQ(w.shape(), (Shape{D, q + 2 * kv}));
    for (int64_t i = 0; i < D; ++i)
      for (int64_t col = 0; col < q + 2 * kv; ++col) {
        const char* part = col < q ? "q" : col < q + kv ? "k" : "v";
        const int64_t o = col < q ? col : col < q + kv ? col - q : col - q - kv;
        ASSERT_EQ(w.at_as_double(i * (q + 2 * kv) + col),
                  h.at(p + "self_attn." + part + "_proj.weight", o * D + i)) << col;
      }
    const Array& bias = m.params.at(b + "attn/qkv/b");
    for (int64_t col = 0; col < q + 2 * kv; ++col) {
      const char* part = col < q ? "q" : col < q + kv ? "k" : "v";
      const int64_t o = col < q ? col : col < q + kv ? col - q : col - q - kv;
      ASSERT_EQ(bias.at_as_double(col), h.at(p + "self_attn." + part + "_proj.bias", o));
    }
    expect_transposed(m.params.at(b + "attn/out/w"), h, p + "self_attn.o_proj.weight");
    expect_same(m.params.at(b + "attn/out/b"), h, p + "self_attn.o_proj.bias");
    expect_same(m.params.at(b + "norm1/g"), h, p + "input_layernorm.weight");
    expect_same(m.params.at(b + "norm2/g"), h, p + "post_attention_layernorm.weight");
    expect_transposed(m.params.at(b + "mlp/gate/w"), h, p + "mlp.gate_proj.weight");
    expect_transposed(m.params.at(b + "mlp/up/w"), h, p + "mlp.up_proj.weight");
    expect_transposed(m.params.at(b + "mlp/down/w"), h, p + "mlp.down_proj.weight");
  }
  expect_same(m.params.at("tok/table"), h, "model.embed_tokens.weight");
  expect_same(m.params.at("norm/g"), h, "model.norm.weight");
  expect_transposed(m.params.at("head/w"), h, "lm_head.weight");
}

TEST_F(HfTest, ShardedEqualsSingleFile) {
  const HfDir h = llama_dir(false, true);
  h.write(path("one"), llama_config(false, true));
  h.write_sharded(path("sharded"), llama_config(false, true), 3);
  const HfModel a = load_hf_model(path("one")), b = load_hf_model(path("sharded"));
  ASSERT_EQ(a.params.names(), b.params.names());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(a.params.value(i).bit_equal(b.params.value(i)));
  EXPECT_FALSE(a.params.contains("block0/attn/qkv/b"));
  EXPECT_FALSE(a.params.contains("head/w"));
}

TEST_F(HfTest, EveryErrorNamesTheFileAndTheTensorOrField) {
  const std::string st = "model.safetensors";
  {
    HfDir h = gpt2_dir("transformer.", true);
    h.remove("transformer.h.1.mlp.c_fc.bias");
    h.write(path("missing"), gpt2_config(true));
    EXPECT_THROW_CONTAINING(load_hf_model(path("missing")), std::runtime_error, path("missing/" + st),
                            "missing tensor \"transformer.h.1.mlp.c_fc.bias\"");
  }
  {
    HfDir h = gpt2_dir("transformer.", true);
    h.add("transformer.h.0.attn.extra", {2}, DType::f32);
    h.write(path("unexpected"), gpt2_config(true));
    EXPECT_THROW_CONTAINING(load_hf_model(path("unexpected")), std::runtime_error, path("unexpected/" + st),
                            "unexpected tensor \"transformer.h.0.attn.extra\"");
  }
  {
    HfDir h = llama_dir(false, false);
    h.remove("model.layers.1.self_attn.k_proj.weight");
    h.add("model.layers.1.self_attn.k_proj.weight", {H * DH, D}, DType::f32);  // MHA-sized, config says GQA
    h.write(path("shape"), llama_config(false, false));
    EXPECT_THROW_CONTAINING(load_hf_model(path("shape")), std::runtime_error, path("shape/" + st),
                            "\"model.layers.1.self_attn.k_proj.weight\"", "[4,8]");
  }
  {
    HfDir h = llama_dir(false, false);
    h.remove("model.norm.weight");
    h.add("model.norm.weight", {D}, DType::i32);
    h.write(path("dtype"), llama_config(false, false));
    EXPECT_THROW_CONTAINING(load_hf_model(path("dtype")), std::runtime_error, path("dtype/" + st),
                            "\"model.norm.weight\"", "i32");
  }
  const HfDir g = gpt2_dir("", true);
  auto config_error = [&](const std::string& name, const std::string& config, const std::string& what) {
    g.write(path(name), config);
    EXPECT_THROW_CONTAINING(load_hf_model(path(name)), std::runtime_error, path(name + "/config.json"), what);
  };
  config_error("bert", R"({"model_type": "bert", "vocab_size": 3})", "\"bert\"");
  config_error("malformed", R"({"model_type": "gpt2", )", "malformed");
  config_error("relu", gpt2_config(true, R"(, "activation_function": "relu")"), "activation_function");
  config_error("layer_idx", gpt2_config(true, R"(, "scale_attn_by_inverse_layer_idx": true)"),
               "scale_attn_by_inverse_layer_idx");
  config_error("unscaled", gpt2_config(true, R"(, "scale_attn_weights": false)"), "scale_attn_weights");
  config_error("no_vocab", R"({"model_type": "gpt2", "n_positions": 8})", "vocab_size");
  const HfDir l = llama_dir(false, false);
  auto llama_error = [&](const std::string& name, const std::string& extra, const std::string& what) {
    l.write(path(name), llama_config(false, false, extra));
    EXPECT_THROW_CONTAINING(load_hf_model(path(name)), std::runtime_error, path(name + "/config.json"), what);
  };
  llama_error("rope", R"(, "rope_parameters": {"rope_type": "linear", "factor": 2.0})", "\"linear\"");
  llama_error("rope4", R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0})", "\"dynamic\"");
  llama_error("act", R"(, "hidden_act": "gelu")", "hidden_act");
  llama_error("mlp_bias", R"(, "mlp_bias": true)", "mlp_bias");
  llama_error("head_dim", R"(, "head_dim": 4)", "head_dim");
  {
    const HfDir h = llama_dir(false, true);
    h.write_sharded(path("shard"), llama_config(false, true), 3);
    fs::remove(path("shard/model-00002-of-00003.safetensors"));
    EXPECT_THROW_CONTAINING(load_hf_model(path("shard")), std::runtime_error,
                            path("shard/model-00002-of-00003.safetensors"), "shard missing");
  }
  EXPECT_THROW_CONTAINING(load_hf_model(path("nothing")), std::runtime_error, path("nothing/config.json"));
}


}  // namespace
}  // namespace fjit::hf
