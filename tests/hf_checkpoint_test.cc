// core/hf: Hugging Face GPT-2 and Llama directories in and out. The fixtures are written here
// with HF's names and layouts (no Python); every loaded parameter is checked element by
// element against the HF tensor it came from, through plain index arithmetic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/hf/hf_checkpoint.h"
#include "core/ir/convert.h"

namespace fjit::hf {
namespace {

namespace fs = std::filesystem;

#define EXPECT_THROW_CONTAINING(stmt, type, ...)                                  \
  do {                                                                            \
    try {                                                                         \
      stmt;                                                                       \
      ADD_FAILURE() << "no exception from " #stmt;                                \
    } catch (const type& e) {                                                     \
      for (const std::string& part : std::vector<std::string>{__VA_ARGS__})         \
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)            \
            << "message lacks \"" << part << "\": " << e.what();                  \
    }                                                                             \
  } while (0)

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// HF tensors with distinct integer values (< 256: exact in bf16 too): element i of the k-th
// tensor is (7 i + 31 k) mod 256.
struct HfDir {
  io::NamedArrays tensors;
  std::map<std::string, int> index;

  void add(const std::string& name, Shape shape, DType t) {
    const int k = static_cast<int>(tensors.size());
    Array a(t, shape);
    for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(t, a.raw(), i, value(k, i));
    index[name] = k;
    tensors.emplace_back(name, a);
  }
  static double value(int k, int64_t i) { return static_cast<double>((7 * i + 31 * k) % 256); }
  double at(const std::string& name, int64_t i) const { return value(index.at(name), i); }
  void remove(const std::string& name) {
    for (auto it = tensors.begin(); it != tensors.end(); ++it)
      if (it->first == name) { tensors.erase(it); return; }
    FAIL() << name;
  }
  void write(const std::string& dir, const std::string& config) const {
    fs::create_directories(dir);
    write_file(dir + "/config.json", config);
    io::Checkpoint ck;
    ck.tensors = tensors;
    io::save_checkpoint(dir + "/model.safetensors", ck);
  }
  // The tensors spread round-robin over `n` shards with an index, as from_pretrained's
  // max_shard_size does.
  void write_sharded(const std::string& dir, const std::string& config, int n) const {
    fs::create_directories(dir);
    write_file(dir + "/config.json", config);
    std::vector<io::Checkpoint> shards(n);
    nlohmann::json map = nlohmann::json::object();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i % n + 1, n);
      shards[i % n].tensors.push_back(tensors[i]);
      map[tensors[i].first] = file;
    }
    for (int s = 0; s < n; ++s)
      io::save_checkpoint(dir + fmt::format("/model-{:05d}-of-{:05d}.safetensors", s + 1, n), shards[s]);
    write_file(dir + "/model.safetensors.index.json", nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump());
  }
};

constexpr int64_t V = 11, T = 8, D = 8, L = 2, F = 12;

std::string gpt2_config(bool tied, const std::string& extra = "") {
  return fmt::format(R"({{"model_type": "gpt2", "vocab_size": {}, "n_positions": {}, "n_embd": {},
    "n_layer": {}, "n_head": 2, "n_inner": {}, "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": {}, "resid_pdrop": 0.1{}}})",
                     V, T, D, L, F, tied ? "true" : "false", extra);
}

HfDir gpt2_dir(const std::string& prefix, bool tied, DType t = DType::f32) {
  HfDir h;
  h.add(prefix + "wte.weight", {V, D}, t);
  h.add(prefix + "wpe.weight", {T, D}, t);
  for (int i = 0; i < L; ++i) {
    const std::string b = fmt::format("{}h.{}.", prefix, i);
    h.add(b + "ln_1.weight", {D}, t);
    h.add(b + "ln_1.bias", {D}, t);
    h.add(b + "attn.c_attn.weight", {D, 3 * D}, t);
    h.add(b + "attn.c_attn.bias", {3 * D}, t);
    h.add(b + "attn.c_proj.weight", {D, D}, t);
    h.add(b + "attn.c_proj.bias", {D}, t);
    h.add(b + "ln_2.weight", {D}, t);
    h.add(b + "ln_2.bias", {D}, t);
    h.add(b + "mlp.c_fc.weight", {D, F}, t);
    h.add(b + "mlp.c_fc.bias", {F}, t);
    h.add(b + "mlp.c_proj.weight", {F, D}, t);
    h.add(b + "mlp.c_proj.bias", {D}, t);
  }
  h.add(prefix + "ln_f.weight", {D}, t);
  h.add(prefix + "ln_f.bias", {D}, t);
  if (!tied) h.add("lm_head.weight", {V, D}, t);
  return h;
}

constexpr int64_t H = 4, KV = 2, DH = D / H;

std::string llama_config(bool bias, bool tied, const std::string& extra = "") {
  return fmt::format(R"({{"model_type": "llama", "vocab_size": {}, "max_position_embeddings": {},
    "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": {},
    "num_key_value_heads": {}, "head_dim": {}, "hidden_act": "silu", "rms_norm_eps": 1e-5,
    "rope_parameters": {{"rope_theta": 500000.0, "rope_type": "default"}}, "attention_bias": {},
    "mlp_bias": false, "tie_word_embeddings": {}{}}})",
                     V, T, D, F, L, H, KV, DH, bias ? "true" : "false", tied ? "true" : "false", extra);
}

HfDir llama_dir(bool bias, bool tied, DType t = DType::f32) {
  HfDir h;
  h.add("model.embed_tokens.weight", {V, D}, t);
  for (int i = 0; i < L; ++i) {
    const std::string b = fmt::format("model.layers.{}.", i);
    h.add(b + "input_layernorm.weight", {D}, t);
    h.add(b + "self_attn.q_proj.weight", {H * DH, D}, t);
    h.add(b + "self_attn.k_proj.weight", {KV * DH, D}, t);
    h.add(b + "self_attn.v_proj.weight", {KV * DH, D}, t);
    if (bias)
      for (const char* p : {"q", "k", "v"}) h.add(b + "self_attn." + p + "_proj.bias", {(*p == 'q' ? H : KV) * DH}, t);
    h.add(b + "self_attn.o_proj.weight", {D, H * DH}, t);
    if (bias) h.add(b + "self_attn.o_proj.bias", {D}, t);
    h.add(b + "post_attention_layernorm.weight", {D}, t);
    h.add(b + "mlp.gate_proj.weight", {F, D}, t);
    h.add(b + "mlp.up_proj.weight", {F, D}, t);
    h.add(b + "mlp.down_proj.weight", {D, F}, t);
  }
  h.add("model.norm.weight", {D}, t);
  if (!tied) h.add("lm_head.weight", {V, D}, t);
  return h;
}

class HfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("fjit_hf_{}_{}", ::getpid(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& sub) const { return (dir_ / sub).string(); }
  fs::path dir_;
};

// fjit [rows, cols] (or 1-D) equals the HF tensor as it is.
void expect_same(const Array& a, const HfDir& h, const std::string& name) {
  for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.at_as_double(i), h.at(name, i)) << name << " [" << i << "]";
}
// fjit [in, out] equals HF [out, in] transposed.
void expect_transposed(const Array& a, const HfDir& h, const std::string& name) {
  const int64_t in = a.shape()[0], out = a.shape()[1];
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) ASSERT_EQ(a.at_as_double(i * out + o), h.at(name, o * in + i)) << name;
}

std::vector<std::string> names_of(const ArrayDict& d) { return d.names(); }

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
  const HfDir h = llama_dir(true, false, DType::bf16);
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

TEST_F(HfTest, SaveThenLoadGivesTheSameArraysAndConfig) {
  for (bool llama : {false, true}) {
    const std::string in = path(llama ? "llama_in" : "gpt2_in"), out = path(llama ? "llama_out" : "gpt2_out");
    if (llama) llama_dir(true, false, DType::bf16).write(in, llama_config(true, false));
    else gpt2_dir("", true).write(in, gpt2_config(true));
    const HfModel a = load_hf_model(in);
    save_hf_model(out, a);
    const HfModel b = load_hf_model(out);
    EXPECT_EQ(b.config_json, a.config_json);
    ASSERT_EQ(a.params.names(), b.params.names());
    for (size_t i = 0; i < a.params.size(); ++i)
      EXPECT_TRUE(a.params.value(i).bit_equal(b.params.value(i))) << a.params.name(i);
    // HF's names as the causal-LM classes write them; tied embeddings written once.
    const io::Checkpoint ck = io::load_checkpoint(out + "/model.safetensors");
    EXPECT_EQ(io::metadata_str(ck, "format"), "pt");
    EXPECT_EQ(ck.find("lm_head.weight") != nullptr, llama);
    EXPECT_NE(ck.find(llama ? "model.layers.1.self_attn.v_proj.weight" : "transformer.h.1.attn.c_attn.weight"), nullptr);
    EXPECT_EQ(ck.tensors.size(), (llama ? llama_dir(true, false) : gpt2_dir("", true)).tensors.size());
  }
}

TEST_F(HfTest, FromScratchDecodersExportAndComeBack) {
  DecoderConfig gpt{.vocab = 13, .context = 6, .dim = 8, .layers = 2, .heads = 2};
  DecoderConfig llama = gpt;
  llama.rotary = true;
  llama.norm = TransformerBlockOptions::Norm::kRmsNorm;
  llama.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  llama.tied_embeddings = false;
  for (const DecoderConfig& c : {gpt, llama}) {
    ArrayDict params;
    decoder_params(params, c, 7);
    const HfModel m = hf_model_for(c, params);
    EXPECT_EQ(m.architecture, c.rotary ? Architecture::kLlama : Architecture::kGpt2);
    EXPECT_EQ(m.config.mlp_hidden, 4 * c.dim);
    const std::string out = path(c.rotary ? "llama" : "gpt2");
    save_hf_model(out, m);
    const HfModel b = load_hf_model(out);
    for (auto [x, y] : {std::pair{b.config.vocab, c.vocab}, {b.config.context, c.context}, {b.config.dim, c.dim},
                        {b.config.layers, c.layers}, {b.config.heads, c.heads}})
      EXPECT_EQ(x, y);
    EXPECT_EQ(b.config.rotary, c.rotary);
    EXPECT_EQ(b.config.norm, c.norm);
    EXPECT_EQ(b.config.mlp, c.mlp);
    EXPECT_EQ(b.config.tied_embeddings, c.tied_embeddings);
    ASSERT_EQ(b.params.names(), params.names());
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params.value(i).bit_equal(b.params.value(i)));
  }
  DecoderConfig neither = gpt;
  neither.rotary = true;
  ArrayDict p;
  decoder_params(p, neither, 1);
  EXPECT_THROW_CONTAINING(hf_model_for(neither, p), std::invalid_argument, "neither GPT-2", "rotary");
  ArrayDict q;
  decoder_params(q, gpt, 1);
  q.set("block0/attn/qkv/lora_a", Array(DType::f32, {8, 2}));
  const HfModel with_lora = hf_model_for(gpt, q);
  EXPECT_THROW_CONTAINING(save_hf_model(path("lora"), with_lora), std::invalid_argument, "block0/attn/qkv/lora_a",
                          "merge");
  EXPECT_FALSE(fs::exists(path("lora/model.safetensors")));
}

// fjit LoRA entries with distinct values; returns lora_b.
Array add_lora(ArrayDict& p, const std::string& layer, int64_t in, int64_t out, int64_t r, float scale) {
  std::vector<float> a(in * r), b(r * out);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i) + 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -0.25f * static_cast<float>(i);
  p.set(layer + "/lora_a", Array::from_vector(a, {in, r}));
  p.set(layer + "/lora_b", Array::from_vector(b, {r, out}));
  p.set(layer + "/lora_scale", Array::scalar(scale));
  return p.at(layer + "/lora_b");
}

TEST_F(HfTest, PeftAdapterNamesShapesAndValues) {
  // GPT-2: Conv1D modules, one adapter each.
  HfModel g = load_hf_model((gpt2_dir("", true).write(path("g"), gpt2_config(true)), path("g")));
  add_lora(g.params, "block0/attn/qkv", D, 3 * D, 2, 4.0f);
  add_lora(g.params, "block1/mlp/fc", D, F, 4, 0.5f);
  save_peft_adapter(path("g_adapter"), g, "some/base");
  io::Checkpoint ck = io::load_checkpoint(path("g_adapter/adapter_model.safetensors"));
  ASSERT_EQ(ck.tensors.size(), 4u);
  const Array* a0 = ck.find("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight");
  const Array* b0 = ck.find("base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
  ASSERT_TRUE(a0 && b0);
  EXPECT_EQ(a0->shape(), (Shape{2, D}));
  EXPECT_EQ(b0->shape(), (Shape{3 * D, 2}));
  const Array& fa = g.params.at("block0/attn/qkv/lora_a");
  const Array& fb = g.params.at("block0/attn/qkv/lora_b");
  for (int64_t i = 0; i < D; ++i)
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(a0->at_as_double(k * D + i), fa.at_as_double(i * 2 + k));
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t o = 0; o < 3 * D; ++o) EXPECT_EQ(b0->at_as_double(o * 2 + k), fb.at_as_double(k * 3 * D + o));
  EXPECT_EQ(ck.find("base_model.model.transformer.h.1.mlp.c_fc.lora_B.weight")->shape(), (Shape{F, 4}));
  auto j = nlohmann::json::parse(slurp(path("g_adapter/adapter_config.json")));
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["base_model_name_or_path"], "some/base");
  EXPECT_EQ(j["fan_in_fan_out"], true);
  EXPECT_EQ(j["r"], 2);
  EXPECT_EQ(j["lora_alpha"], 8);  // scale 4 * r 2
  EXPECT_EQ(j["target_modules"],
            nlohmann::json({"transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_fc"}));
  EXPECT_EQ(j["rank_pattern"]["transformer\\.h\\.1\\.mlp\\.c_fc"], 4);
  EXPECT_EQ(j["alpha_pattern"]["transformer\\.h\\.1\\.mlp\\.c_fc"], 2);  // 0.5 * 4

  // Llama: the fused qkv adapter is three adapters sharing A, each with its columns of B.
  HfModel l = load_hf_model((llama_dir(false, true).write(path("l"), llama_config(false, true)), path("l")));
  const int64_t q = H * DH, kv = KV * DH;
  const Array b = add_lora(l.params, "block1/attn/qkv", D, q + 2 * kv, 3, 2.0f);
  save_peft_adapter(path("l_adapter"), l, "base");
  ck = io::load_checkpoint(path("l_adapter/adapter_model.safetensors"));
  ASSERT_EQ(ck.tensors.size(), 6u);
  const Array* qa = ck.find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight");
  ASSERT_NE(qa, nullptr);
  int64_t col = 0;
  for (auto [part, n] : std::vector<std::pair<std::string, int64_t>>{{"q", q}, {"k", kv}, {"v", kv}}) {
    const std::string base = "base_model.model.model.layers.1.self_attn." + part + "_proj.";
    const Array* a = ck.find(base + "lora_A.weight");
    const Array* bb = ck.find(base + "lora_B.weight");
    ASSERT_TRUE(a && bb) << part;
    EXPECT_TRUE(a->bit_equal(*qa));
    ASSERT_EQ(bb->shape(), (Shape{n, 3}));
    for (int64_t o = 0; o < n; ++o)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(bb->at_as_double(o * 3 + k), b.at_as_double(k * (q + 2 * kv) + col + o));
    col += n;
  }
  j = nlohmann::json::parse(slurp(path("l_adapter/adapter_config.json")));
  EXPECT_EQ(j["fan_in_fan_out"], false);
  EXPECT_EQ(j["lora_alpha"], 6);
  EXPECT_EQ(j["target_modules"].size(), 3u);

  HfModel none = load_hf_model(path("l"));
  EXPECT_THROW(save_peft_adapter(path("none"), none, "base"), std::invalid_argument);
  add_lora(none.params, "tok", V, D, 2, 1.0f);
  EXPECT_THROW_CONTAINING(save_peft_adapter(path("none"), none, "base"), std::invalid_argument, "\"tok\"");
}

}  // namespace
}  // namespace fjit::hf
