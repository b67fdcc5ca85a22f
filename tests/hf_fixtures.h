// Hugging Face directories written by the tests of core/hf (hf_load_test, hf_save_test), with
// HF's names and layouts and no Python: tensors of distinct integer values, so every loaded
// parameter can be checked element by element against the HF tensor it came from.
#pragma once

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

namespace fjit::hf::fixtures {


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

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

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

inline std::string gpt2_config(bool tied, const std::string& extra = "") {
  return fmt::format(R"({{"model_type": "gpt2", "vocab_size": {}, "n_positions": {}, "n_embd": {},
    "n_layer": {}, "n_head": 2, "n_inner": {}, "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": {}, "resid_pdrop": 0.1{}}})",
                     V, T, D, L, F, tied ? "true" : "false", extra);
}

inline HfDir gpt2_dir(const std::string& prefix, bool tied, DType t = DType::f32) {
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

inline std::string llama_config(bool bias, bool tied, const std::string& extra = "") {
  return fmt::format(R"({{"model_type": "llama", "vocab_size": {}, "max_position_embeddings": {},
    "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": {},
    "num_key_value_heads": {}, "head_dim": {}, "hidden_act": "silu", "rms_norm_eps": 1e-5,
    "rope_parameters": {{"rope_theta": 500000.0, "rope_type": "default"}}, "attention_bias": {},
    "mlp_bias": false, "tie_word_embeddings": {}{}}})",
                     V, T, D, F, L, H, KV, DH, bias ? "true" : "false", tied ? "true" : "false", extra);
}

inline HfDir llama_dir(bool bias, bool tied, DType t = DType::f32) {
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
inline void expect_same(const Array& a, const HfDir& h, const std::string& name) {
  for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.at_as_double(i), h.at(name, i)) << name << " [" << i << "]";
}
// fjit [in, out] equals HF [out, in] transposed.
inline void expect_transposed(const Array& a, const HfDir& h, const std::string& name) {
  const int64_t in = a.shape()[0], out = a.shape()[1];
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) ASSERT_EQ(a.at_as_double(i * out + o), h.at(name, o * in + i)) << name;
}

inline std::vector<std::string> names_of(const ArrayDict& d) { return d.names(); }

}  // namespace fjit::hf::fixtures
