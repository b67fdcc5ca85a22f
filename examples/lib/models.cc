#include "lib/models.h"

#include <stdexcept>

namespace fjit::examples {
namespace {

constexpr int64_t kPatch = 7, kTokens = 16, kDim = 64, kHeads = 4, kMlp = 128, kBlocks = 4;

// Images [B, 784] as f32 [B, 28, 28, 1] in [0, 1].
Tensor as_images(const Tensor& x) {
  Tensor f = x.dtype() == DType::u8 ? cast(x, DType::f32) * (1.0 / 255.0) : x;
  return reshape(f, {x.dim(0), 28, 28, 1});
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
  h = max_pool(relu(conv2d(p, "conv1", h, same)), {2, 2}, {2, 2});
  h = max_pool(relu(conv2d(p, "conv2", h, same)), {2, 2}, {2, 2});
  h = max_pool(relu(conv2d(p, "conv3", h, same)), {2, 2}, {2, 2}, Padding::same());  // 7x7 -> 4x4
  h = maybe_dropout(reshape(h, {x.dim(0), 4 * 4 * 128}), s.dropout / 2, training, key, 1);
  h = maybe_dropout(relu(linear(p, "fc1", h)), s.dropout, training, key, 2);
  return linear(p, "fc2", h);
}

// The ViT's pre-norm blocks: layer norm, 4-head non-causal attention, a GELU MLP of kMlp.
TransformerBlockOptions vit_block() {
  return {.attention = {.heads = kHeads, .causal = false}, .mlp_hidden = kMlp};
}

Tensor vit_logits(const ModelSpec& s, const Params& p, const Tensor& x, bool training,
                  const Tensor& key) {
  const int64_t b = x.dim(0);
  Tensor cols = patches(as_images(x), Window{{kPatch, kPatch}, {kPatch, kPatch}});  // [B,4,4,49]
  Tensor h = linear(p, "embed", reshape(cols, {b * kTokens, kPatch * kPatch}));
  h = reshape(h, {b, kTokens, kDim}) + p["pos"];
  for (int64_t k = 0; k < kBlocks; ++k) {
    const uint32_t site = static_cast<uint32_t>(10 * (k + 1));
    TransformerBlockOptions o = vit_block();
    o.residual_branch = [&](const Tensor& y, int index) {
      return maybe_dropout(y, s.dropout, training, key, site + static_cast<uint32_t>(index));
    };
    h = transformer_block(p, "block" + std::to_string(k), h, o);
  }
  h = mean(layer_norm(p, "ln", h), {1});  // [B, D]
  return linear(p, "head", h);
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
      conv2d_params(d, "conv1", {3, 3, 1, 32}, seed + 1, Init::he_normal);
      conv2d_params(d, "conv2", {3, 3, 32, 64}, seed + 2, Init::he_normal);
      conv2d_params(d, "conv3", {3, 3, 64, 128}, seed + 5, Init::he_normal);
      linear_params(d, "fc1", 4 * 4 * 128, 128, seed + 3, Init::he_normal);
      linear_params(d, "fc2", 128, 10, seed + 4, Init::glorot_uniform);
      return d;
    case ModelKind::vit:
      linear_params(d, "embed", kPatch * kPatch, kDim, seed + 1);
      d.set("pos", glorot_normal({kTokens, kDim}, seed + 2));
      for (int64_t k = 0; k < kBlocks; ++k) {
        transformer_block_params(d, "block" + std::to_string(k), kDim, seed + 100 * (k + 1) + 1, vit_block());
      }
      layer_norm_params(d, "ln", kDim);
      linear_params(d, "head", kDim, 10, seed + 3);
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
      return mlp(p, x);
    }
    case ModelKind::cnn: return cnn_logits(spec, p, images, training, key);
    case ModelKind::vit: return vit_logits(spec, p, images, training, key);
  }
  return Tensor();
}

ModelSpec model_spec(const training::TrainOptions& o) {
  ModelSpec spec;
  if (!model_from_name(o.model, &spec.kind))
    throw std::invalid_argument("Trainer: unknown model '" + o.model + "' (mlp, cnn or vit)");
  spec.layers = o.layers;
  spec.dropout = o.dropout;
  return spec;
}

training::Model classifier(const ModelSpec& spec) {
  training::Model m;
  m.name = model_name(spec.kind);
  const bool mlp = spec.kind == ModelKind::mlp;
  m.inputs = !mlp ? 28 * 28 : spec.layers.size() < 2 ? 0 : spec.layers.front();
  m.pixels = mlp ? DType::f32 : DType::u8;
  m.uses_key = !mlp;
  m.init = [spec](uint64_t seed) { return init_model(spec, seed); };
  m.logits = [spec](const Params& p, const Tensor& images, bool training, const Tensor& key) {
    return model_logits(spec, p, images, training, key);
  };
  return m;
}

training::ModelMenu model_menu() {
  return {{"mlp", "cnn", "vit"},
          [](const training::TrainOptions& o) { return classifier(model_spec(o)); }};
}

}  // namespace fjit::examples
