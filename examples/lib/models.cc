#include "lib/models.h"

#include <cmath>

#include <fmt/format.h>

#include "core/lib/initializers.h"

namespace fjit::examples {
namespace {

constexpr int64_t kPatch = 7, kTokens = 16, kDim = 64, kHeads = 4, kMlp = 128, kBlocks = 4;

// Images [B, 784] as f32 [B, 28, 28, 1] in [0, 1].
Tensor as_images(const Tensor& x) {
  Tensor f = x.dtype() == DType::u8 ? cast(x, DType::f32) * (1.0 / 255.0) : x;
  return reshape(f, {x.dim(0), 28, 28, 1});
}

Tensor dense(const Params& p, const std::string& name, const Tensor& x) {
  return matmul(x, p[name + "/w"]) + p[name + "/b"];
}

// A dropout key per use: the step's key folded with a fixed id per site.
Tensor maybe_dropout(const Tensor& x, double rate, bool training, const Tensor& key, uint32_t site) {
  if (!training || rate == 0.0) return x;
  return dropout(x, rate, fold_in(key, site));
}

Tensor cnn_logits(const ModelSpec& s, const Params& p, const Tensor& x, bool training,
                  const Tensor& key) {
  const ConvOptions same{{1, 1}, Padding::same()};
  Tensor h = as_images(x);
  h = max_pool(relu(conv2d(h, p["conv1/w"], same) + p["conv1/b"]), {2, 2}, {2, 2});
  h = max_pool(relu(conv2d(h, p["conv2/w"], same) + p["conv2/b"]), {2, 2}, {2, 2});
  h = max_pool(relu(conv2d(h, p["conv3/w"], same) + p["conv3/b"]), {2, 2}, {2, 2},
               Padding::same());  // 7x7 -> 4x4
  h = maybe_dropout(reshape(h, {x.dim(0), 4 * 4 * 128}), s.dropout / 2, training, key, 1);
  h = maybe_dropout(relu(dense(p, "fc1", h)), s.dropout, training, key, 2);
  return dense(p, "fc2", h);
}

// Multi-head self-attention of h [B, T, D].
Tensor attention(const Params& p, const std::string& name, const Tensor& h) {
  const int64_t b = h.dim(0), dh = kDim / kHeads;
  Tensor qkv = dense(p, name + "/qkv", reshape(h, {b * kTokens, kDim}));  // [B*T, 3D]
  qkv = transpose(reshape(qkv, {b, kTokens, 3, kHeads, dh}), {2, 0, 3, 1, 4});  // [3,B,H,T,dh]
  auto part = [&](int64_t i) {
    return reshape(slice(qkv, {i, 0, 0, 0, 0}, {i + 1, b, kHeads, kTokens, dh}),
                   {b, kHeads, kTokens, dh});
  };
  Tensor scores = matmul(part(0), part(1), false, true) * (1.0 / std::sqrt(double(dh)));
  Tensor mixed = matmul(softmax(scores, -1), part(2));  // [B, H, T, dh]
  mixed = reshape(transpose(mixed, {0, 2, 1, 3}), {b * kTokens, kDim});
  return reshape(dense(p, name + "/out", mixed), {b, kTokens, kDim});
}

Tensor vit_logits(const ModelSpec& s, const Params& p, const Tensor& x, bool training,
                  const Tensor& key) {
  const int64_t b = x.dim(0);
  Tensor cols = patches(as_images(x), Window{{kPatch, kPatch}, {kPatch, kPatch}});  // [B,4,4,49]
  Tensor h = dense(p, "embed", reshape(cols, {b * kTokens, kPatch * kPatch}));
  h = reshape(h, {b, kTokens, kDim}) + p["pos"];
  for (int64_t k = 0; k < kBlocks; ++k) {
    const std::string n = "block" + std::to_string(k);
    const uint32_t site = static_cast<uint32_t>(10 * (k + 1));
    Tensor a = attention(p, n + "/attn", layer_norm(h, p[n + "/ln1/g"], p[n + "/ln1/b"]));
    h = h + maybe_dropout(a, s.dropout, training, key, site);
    Tensor m = reshape(layer_norm(h, p[n + "/ln2/g"], p[n + "/ln2/b"]), {b * kTokens, kDim});
    m = dense(p, n + "/mlp2", gelu(dense(p, n + "/mlp1", m)));
    h = h + maybe_dropout(reshape(m, {b, kTokens, kDim}), s.dropout, training, key, site + 1);
  }
  h = mean(layer_norm(h, p["ln/g"], p["ln/b"]), {1});  // [B, D]
  return dense(p, "head", h);
}

void add_dense(ArrayDict& d, const std::string& name, const Shape& w, uint64_t seed, bool relu) {
  d.set(name + "/w", relu ? he_normal(w, seed) : glorot_uniform(w, seed));
  d.set(name + "/b", zeros({w.back()}));
}

void add_norm(ArrayDict& d, const std::string& name) {
  d.set(name + "/g", Array::full(DType::f32, {kDim}, 1.0));
  d.set(name + "/b", zeros({kDim}));
}

}  // namespace

const char* model_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::mlp: return "mlp";
    case ModelKind::cnn: return "cnn";
    case ModelKind::vit: return "vit";
  }
  return "?";
}

bool model_from_name(const std::string& name, ModelKind* out) {
  for (ModelKind k : {ModelKind::mlp, ModelKind::cnn, ModelKind::vit})
    if (name == model_name(k)) {
      *out = k;
      return true;
    }
  return false;
}

ArrayDict init_model(const ModelSpec& spec, uint64_t seed) {
  ArrayDict d;
  switch (spec.kind) {
    case ModelKind::mlp: return mlp_params(spec.layers, seed, Init::he_normal);
    case ModelKind::cnn:
      add_dense(d, "conv1", {3, 3, 1, 32}, seed + 1, true);
      add_dense(d, "conv2", {3, 3, 32, 64}, seed + 2, true);
      add_dense(d, "conv3", {3, 3, 64, 128}, seed + 5, true);
      add_dense(d, "fc1", {4 * 4 * 128, 128}, seed + 3, true);
      add_dense(d, "fc2", {128, 10}, seed + 4, false);
      return d;
    case ModelKind::vit:
      add_dense(d, "embed", {kPatch * kPatch, kDim}, seed + 1, false);
      d.set("pos", glorot_normal({kTokens, kDim}, seed + 2));
      for (int64_t k = 0; k < kBlocks; ++k) {
        const std::string n = "block" + std::to_string(k);
        const uint64_t s = seed + 100 * (k + 1);
        add_norm(d, n + "/ln1");
        add_dense(d, n + "/attn/qkv", {kDim, 3 * kDim}, s + 1, false);
        add_dense(d, n + "/attn/out", {kDim, kDim}, s + 2, false);
        add_norm(d, n + "/ln2");
        add_dense(d, n + "/mlp1", {kDim, kMlp}, s + 3, false);
        add_dense(d, n + "/mlp2", {kMlp, kDim}, s + 4, false);
      }
      add_norm(d, "ln");
      add_dense(d, "head", {kDim, 10}, seed + 3, false);
      return d;
  }
  return d;
}

Tensor model_logits(const ModelSpec& spec, const Params& p, const Tensor& images, bool training,
                    const Tensor& key) {
  switch (spec.kind) {
    case ModelKind::mlp: {
      // The MLP takes pixels in [0, 1] as they are; u8 bytes are scaled first.
      Tensor x = images.dtype() == DType::u8 ? cast(images, DType::f32) * (1.0 / 255.0) : images;
      const size_t layers = p.size() / 2;
      Tensor h = x;
      for (size_t k = 1; k <= layers; ++k) {
        h = matmul(h, p[fmt::format("w{}", k)]) + p[fmt::format("b{}", k)];
        if (k < layers) h = relu(h);
      }
      return h;
    }
    case ModelKind::cnn: return cnn_logits(spec, p, images, training, key);
    case ModelKind::vit: return vit_logits(spec, p, images, training, key);
  }
  return Tensor();
}

}  // namespace fjit::examples
