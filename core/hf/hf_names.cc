// The maps between fjit's decoder parameters and GPT-2's and Llama's HF tensors, and the
// layout changes between them (core/hf/hf_checkpoint.h lists them).
#include <cstring>

#include <fmt/format.h>

#include "core/hf/hf_internal.h"

namespace fjit::hf::detail {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<Mapping> gpt2_mappings(const DecoderConfig& c) {
  const int64_t d = c.dim, f = c.mlp_hidden > 0 ? c.mlp_hidden : 4 * c.dim;
  std::vector<Mapping> m;
  auto same = [&](std::string fjit, std::string hf, Shape shape) {
    m.push_back({std::move(fjit), shape, {{std::move(hf), shape}}, false});
  };
  same("tok/table", "wte.weight", {c.vocab, d});
  same("pos/table", "wpe.weight", {c.context, d});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string b = fmt::format("block{}/", i), h = fmt::format("h.{}.", i);
    same(b + "norm1/g", h + "ln_1.weight", {d});
    same(b + "norm1/b", h + "ln_1.bias", {d});
    same(b + "attn/qkv/w", h + "attn.c_attn.weight", {d, 3 * d});
    same(b + "attn/qkv/b", h + "attn.c_attn.bias", {3 * d});
    same(b + "attn/out/w", h + "attn.c_proj.weight", {d, d});
    same(b + "attn/out/b", h + "attn.c_proj.bias", {d});
    same(b + "norm2/g", h + "ln_2.weight", {d});
    same(b + "norm2/b", h + "ln_2.bias", {d});
    same(b + "mlp/fc/w", h + "mlp.c_fc.weight", {d, f});
    same(b + "mlp/fc/b", h + "mlp.c_fc.bias", {f});
    same(b + "mlp/proj/w", h + "mlp.c_proj.weight", {f, d});
    same(b + "mlp/proj/b", h + "mlp.c_proj.bias", {d});
  }
  same("norm/g", "ln_f.weight", {d});
  same("norm/b", "ln_f.bias", {d});
  if (!c.tied_embeddings) m.push_back({"head/w", {d, c.vocab}, {{"lm_head.weight", {c.vocab, d}}}, true});
  return m;
}

std::vector<Mapping> llama_mappings(const DecoderConfig& c) {
  const int64_t d = c.dim, f = c.mlp_hidden > 0 ? c.mlp_hidden : 4 * c.dim;
  const int64_t dh = c.dim / c.heads, kv = c.kv_heads > 0 ? c.kv_heads : c.heads;
  const int64_t q_cols = c.heads * dh, kv_cols = kv * dh, qkv_cols = q_cols + 2 * kv_cols;
  std::vector<Mapping> m;
  auto same = [&](std::string fjit, std::string hf, Shape shape) {
    m.push_back({std::move(fjit), shape, {{std::move(hf), shape}}, false});
  };
  // fjit [in, out] from nn.Linear's [out, in].
  auto linear = [&](std::string fjit, std::string hf, int64_t in, int64_t out) {
    m.push_back({std::move(fjit), {in, out}, {{std::move(hf), {out, in}}}, true});
  };
  same("tok/table", "embed_tokens.weight", {c.vocab, d});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string b = fmt::format("block{}/", i), h = fmt::format("layers.{}.", i);
    same(b + "norm1/g", h + "input_layernorm.weight", {d});
    m.push_back({b + "attn/qkv/w", {d, qkv_cols},
                 {{h + "self_attn.q_proj.weight", {q_cols, d}},
                  {h + "self_attn.k_proj.weight", {kv_cols, d}},
                  {h + "self_attn.v_proj.weight", {kv_cols, d}}},
                 true});
    if (c.attention_bias)
      m.push_back({b + "attn/qkv/b", {qkv_cols},
                   {{h + "self_attn.q_proj.bias", {q_cols}},
                    {h + "self_attn.k_proj.bias", {kv_cols}},
                    {h + "self_attn.v_proj.bias", {kv_cols}}},
                   false});
    linear(b + "attn/out/w", h + "self_attn.o_proj.weight", q_cols, d);
    if (c.attention_bias) same(b + "attn/out/b", h + "self_attn.o_proj.bias", {d});
    same(b + "norm2/g", h + "post_attention_layernorm.weight", {d});
    linear(b + "mlp/gate/w", h + "mlp.gate_proj.weight", d, f);
    linear(b + "mlp/up/w", h + "mlp.up_proj.weight", d, f);
    linear(b + "mlp/down/w", h + "mlp.down_proj.weight", f, d);
  }
  same("norm/g", "norm.weight", {d});
  if (!c.tied_embeddings) linear("head/w", "lm_head.weight", d, c.vocab);
  return m;
}

}  // namespace

std::vector<Mapping> mappings(Architecture a, const DecoderConfig& c) {
  return a == Architecture::kGpt2 ? gpt2_mappings(c) : llama_mappings(c);
}

std::string model_prefix(Architecture a) { return a == Architecture::kGpt2 ? "transformer." : "model."; }

bool ignored_tensor(Architecture a, const DecoderConfig& c, const std::string& name) {
  if (name == "lm_head.weight") return c.tied_embeddings;
  // The buffers older checkpoints hold: "h.<i>.attn.bias" / "h.<i>.attn.masked_bias" (GPT-2),
  // "layers.<i>.self_attn.rotary_emb.inv_freq" (Llama).
  const std::string head = a == Architecture::kGpt2 ? "h." : "layers.";
  if (name.compare(0, head.size(), head) != 0) return false;
  size_t i = head.size();
  const size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == digits) return false;
  const std::string rest = name.substr(i);
  return a == Architecture::kGpt2 ? rest == ".attn.bias" || rest == ".attn.masked_bias"
                                  : rest == ".self_attn.rotary_emb.inv_freq";
}

Array from_parts(const Mapping& m, const std::vector<Array>& parts) {
  const DType t = parts.at(0).dtype();
  if (!m.transpose && parts.size() == 1) return parts[0];
  Array out(t, m.shape);
  const size_t es = static_cast<size_t>(dtype_size(t));
  auto* dst = static_cast<std::byte*>(out.raw());
  if (!m.transpose) {  // 1-D pieces laid end to end
    size_t at = 0;
    for (const Array& p : parts) {
      std::memcpy(dst + at, p.raw(), p.nbytes());
      at += p.nbytes();
    }
    return out;
  }
  // fjit [in, cols]: part k's [out_k, in] transposed into columns [off, off + out_k).
  const int64_t in = m.shape[0], cols = m.shape[1];
  int64_t off = 0;
  for (const Array& p : parts) {
    const auto* src = static_cast<const std::byte*>(p.raw());
    const int64_t rows = p.shape()[0];
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t i = 0; i < in; ++i)
        std::memcpy(dst + (i * cols + off + o) * es, src + (o * in + i) * es, es);
    off += rows;
  }
  return out;
}

std::vector<Array> to_parts(const Mapping& m, const Array& a) {
  if (!m.transpose && m.parts.size() == 1) return {a};
  const size_t es = static_cast<size_t>(dtype_size(a.dtype()));
  const auto* src = static_cast<const std::byte*>(a.raw());
  std::vector<Array> out;
  if (!m.transpose) {
    size_t at = 0;
    for (const Part& p : m.parts) {
      Array piece(a.dtype(), p.shape);
      std::memcpy(piece.raw(), src + at, piece.nbytes());
      at += piece.nbytes();
      out.push_back(std::move(piece));
    }
    return out;
  }
  const int64_t in = m.shape[0], cols = m.shape[1];
  int64_t off = 0;
  for (const Part& p : m.parts) {
    Array piece(a.dtype(), p.shape);
    auto* dst = static_cast<std::byte*>(piece.raw());
    const int64_t rows = p.shape[0];
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t i = 0; i < in; ++i)
        std::memcpy(dst + (o * in + i) * es, src + (i * cols + off + o) * es, es);
    off += rows;
    out.push_back(std::move(piece));
  }
  return out;
}

bool is_lora_name(const std::string& name) {
  return ends_with(name, "/lora_a") || ends_with(name, "/lora_b") || ends_with(name, "/lora_scale");
}

const char* hf_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: return dtype_name(t);
  }
}

}  // namespace fjit::hf::detail
