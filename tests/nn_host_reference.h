// Plain host loops in double for the transformer layers of core/nn with Hugging Face's
// options (grouped-query attention, rotary base, norm epsilon, tanh GELU) and for the decoder
// language model: the oracle of nn_hf_test.cc and nn_hf_decoder_test.cc. Parameters are read
// element by element as doubles, so any stored dtype serves (f64, f32, bf16).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/ir/array.h"
#include "core/nn/decoder.h"
#include "core/trace/dict.h"

namespace fjit::testing {

using Vec = std::vector<double>;

inline Vec values(const Array& a) {
  Vec v(a.size());
  for (int64_t i = 0; i < a.size(); ++i) v[i] = a.at_as_double(i);
  return v;
}

// rows x [n, in] @ w [in, out] (+ b [out]) (+ LoRA when p has "<name>/lora_a").
inline Vec host_linear(const Vec& x, int64_t n, const ArrayDict& p, const std::string& name, bool bias) {
  const Array& w = p.at(name + "/w");
  const int64_t in = w.shape()[0], out = w.shape()[1];
  const Vec wv = values(w);
  const Vec bv = bias ? values(p.at(name + "/b")) : Vec(out, 0.0);
  Vec y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv[o];
      for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * wv[k * out + o];
      y[r * out + o] = acc;
    }
  if (p.contains(name + "/lora_a")) {
    const Vec a = values(p.at(name + "/lora_a")), b = values(p.at(name + "/lora_b"));
    const double s = p.at(name + "/lora_scale").item_as_double();
    const int64_t rank = p.at(name + "/lora_a").shape()[1];
    for (int64_t r = 0; r < n; ++r) {
      Vec xa(rank, 0.0);
      for (int64_t j = 0; j < rank; ++j)
        for (int64_t k = 0; k < in; ++k) xa[j] += x[r * in + k] * a[k * rank + j];
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (int64_t j = 0; j < rank; ++j) acc += xa[j] * b[j * out + o];
        y[r * out + o] += s * acc;
      }
    }
  }
  return y;
}

// rotate-half RoPE of one head vector v [dh] at `pos` with base theta.
inline void host_rotate(double* v, int64_t dh, double pos, double theta) {
  const int64_t h = dh / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double th = pos * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
    const double a = v[i], b = v[i + h];
    v[i] = a * std::cos(th) - b * std::sin(th);
    v[i + h] = b * std::cos(th) + a * std::sin(th);
  }
}

struct HostAttention {
  int64_t heads = 1, kv_heads = 1;
  bool causal = true, rotary = false, bias = true;
  double theta = 10000.0;
};

// Attention over one sequence x [T, D]: the qkv columns are the heads' queries, then the
// kv_heads keys, then the kv_heads values; query head h reads key/value head h / (H / KV).
inline Vec host_attention(const Vec& x, int64_t t, int64_t d, const ArrayDict& p, const std::string& name,
                          const HostAttention& o) {
  Vec qkv = host_linear(x, t, p, name + "/qkv", o.bias);
  const int64_t dh = d / o.heads, kv = o.kv_heads, width = (o.heads + 2 * kv) * dh;
  const int64_t group = o.heads / kv;
  if (o.rotary)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t hd = 0; hd < o.heads + kv; ++hd) host_rotate(&qkv[i * width + hd * dh], dh, double(i), o.theta);
  Vec mixed(t * d, 0.0);
  for (int64_t hd = 0; hd < o.heads; ++hd) {
    const int64_t kcol = (o.heads + hd / group) * dh, vcol = (o.heads + kv + hd / group) * dh;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t seen = o.causal ? i + 1 : t;
      Vec s(seen);
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < dh; ++k) dot += qkv[i * width + hd * dh + k] * qkv[j * width + kcol + k];
        s[j] = dot / std::sqrt(double(dh));
      }
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& v : s) z += v = std::exp(v - m);
      for (int64_t j = 0; j < seen; ++j)
        for (int64_t k = 0; k < dh; ++k) mixed[i * d + hd * dh + k] += s[j] / z * qkv[j * width + vcol + k];
    }
  }
  return host_linear(mixed, t, p, name + "/out", o.bias);
}

// Layer norm (with "<name>/b") or RMS norm (without) over rows of width d.
inline Vec host_norm(Vec v, int64_t d, const ArrayDict& p, const std::string& name, bool rms, double eps) {
  const Vec g = values(p.at(name + "/g"));
  const Vec b = rms ? Vec(d, 0.0) : values(p.at(name + "/b"));
  for (size_t r = 0; r < v.size() / d; ++r) {
    double mu = 0, var = 0;
    if (!rms)
      for (int64_t c = 0; c < d; ++c) mu += v[r * d + c] / double(d);
    for (int64_t c = 0; c < d; ++c) var += (v[r * d + c] - mu) * (v[r * d + c] - mu) / double(d);
    for (int64_t c = 0; c < d; ++c) v[r * d + c] = (v[r * d + c] - mu) / std::sqrt(var + eps) * g[c] + b[c];
  }
  return v;
}

inline double host_gelu(double v, bool tanh_approximation) {
  if (tanh_approximation)
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
}

// transformer_block over one sequence h [T, D].
inline Vec host_block(Vec h, int64_t t, int64_t d, const ArrayDict& p, const std::string& name,
                      const TransformerBlockOptions& o) {
  const bool rms = o.norm == TransformerBlockOptions::Norm::kRmsNorm;
  const double eps = o.norm_eps > 0 ? o.norm_eps : rms ? 1e-6 : 1e-5;
  const MultiHeadAttentionOptions& a = o.attention;
  const HostAttention ho{a.heads, a.kv_heads == 0 ? a.heads : a.kv_heads, a.causal, a.rotary, a.bias, a.rope_theta};
  const Vec att = host_attention(host_norm(h, d, p, name + "/norm1", rms, eps), t, d, p, name + "/attn", ho);
  for (size_t i = 0; i < h.size(); ++i) h[i] += att[i];
  const Vec n2 = host_norm(h, d, p, name + "/norm2", rms, eps);
  Vec m;
  if (o.mlp == TransformerBlockOptions::Mlp::kSwiglu) {
    Vec gate = host_linear(n2, t, p, name + "/mlp/gate", false);
    const Vec up = host_linear(n2, t, p, name + "/mlp/up", false);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    m = host_linear(gate, t, p, name + "/mlp/down", false);
  } else {
    Vec f = host_linear(n2, t, p, name + "/mlp/fc", true);
    for (double& v : f) v = host_gelu(v, o.gelu_tanh);
    m = host_linear(f, t, p, name + "/mlp/proj", true);
  }
  for (size_t i = 0; i < h.size(); ++i) h[i] += m[i];
  return h;
}

// decoder_logits of one sequence of ids: [T, vocab].
inline Vec host_decoder(const ArrayDict& p, const DecoderConfig& c, const std::vector<int32_t>& ids) {
  const int64_t t = static_cast<int64_t>(ids.size()), d = c.dim;
  const Vec table = values(p.at("tok/table"));
  const Vec pos = c.rotary ? Vec() : values(p.at("pos/table"));
  Vec h(t * d);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t k = 0; k < d; ++k) h[i * d + k] = table[ids[i] * d + k] + (c.rotary ? 0.0 : pos[i * d + k]);
  const TransformerBlockOptions o = c.block();
  for (int64_t l = 0; l < c.layers; ++l) h = host_block(h, t, d, p, fmt::format("block{}", l), o);
  const bool rms = c.norm == TransformerBlockOptions::Norm::kRmsNorm;
  h = host_norm(h, d, p, "norm", rms, c.norm_eps > 0 ? c.norm_eps : rms ? 1e-6 : 1e-5);
  if (!c.tied_embeddings) return host_linear(h, t, p, "head", false);
  Vec logits(t * c.vocab, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t v = 0; v < c.vocab; ++v)
      for (int64_t k = 0; k < d; ++k) logits[i * c.vocab + v] += h[i * d + k] * table[v * d + k];
  return logits;
}

// Runs a jitted attention step (x [B, 1, D], pos, cache_k, cache_v) -> (y, cache_k, cache_v)
// token by token over x [B, T, D] (f64) from zero caches [B, kv, tmax, dh]; returns the
// outputs [B, T, D].
template <class Step>
Array decode_token_by_token(Step& step, const ArrayDict& p, const Array& x, int64_t kv, int64_t dh,
                            int64_t tmax) {
  const int64_t b = x.shape()[0], t = x.shape()[1], d = x.shape()[2];
  Array ck = Array::zeros(DType::f64, {b, kv, tmax, dh}), cv = ck.clone();
  Array out(DType::f64, {b, t, d});
  for (int64_t i = 0; i < t; ++i) {
    Array xi(DType::f64, {b, 1, d});
    for (int64_t n = 0; n < b; ++n)
      for (int64_t c = 0; c < d; ++c) xi.data<double>()[n * d + c] = x.data<double>()[(n * t + i) * d + c];
    const auto r = step(p, xi, Array::scalar(static_cast<int32_t>(i)), ck, cv);
    const Array& y = std::get<0>(r);
    ck = std::get<1>(r);
    cv = std::get<2>(r);
    for (int64_t n = 0; n < b; ++n)
      for (int64_t c = 0; c < d; ++c) out.data<double>()[(n * t + i) * d + c] = y.data<double>()[n * d + c];
  }
  return out;
}

}  // namespace fjit::testing
