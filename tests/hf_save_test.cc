// core/hf saving: save_hf_model round trips, from-scratch decoders exported and read back, and
// PEFT adapters' names, shapes and values.
#include "tests/hf_fixtures.h"

namespace fjit::hf {
namespace {

using namespace fixtures;

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
