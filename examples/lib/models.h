// The image classifiers the examples train on 28x28 grey images (Fashion-MNIST): an MLP, a
// CNN and a small vision transformer, as parameter initializers and traced forward passes
// built from fjit's layers (core/nn), and as the trainer's models (parallel/train/model.h).
//
//   mlp  784-512-256-10 (or --layers), ReLU
//   cnn  conv3x3(32)-ReLU-maxpool2, conv3x3(64)-ReLU-maxpool2, conv3x3(128)-ReLU-maxpool2,
//        dropout, dense 128-ReLU, dropout, dense 10 (NHWC, SAME padding)
//   vit  7x7 patches (16 tokens) embedded to 64 with learned positions, 4 pre-norm blocks
//        (transformer_block, core/nn/transformer.h) of
//        4-head self-attention and a GELU MLP (128), dropout, layer norm, mean over tokens,
//        dense 10
// Images come in as [batch, 784], f32 in [0, 1] or the file's u8 bytes (cast and scaled in
// the graph).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fjit.h"
#include "parallel/train/model.h"

namespace fjit::examples {

enum class ModelKind { mlp, cnn, vit };
const char* model_name(ModelKind kind);
// false when `name` is none of "mlp", "cnn", "vit".
bool model_from_name(const std::string& name, ModelKind* out);

struct ModelSpec {
  ModelKind kind = ModelKind::mlp;
  std::vector<int64_t> layers = {784, 512, 256, 10};  // mlp only
  double dropout = 0.0;                               // cnn and vit
};

// Parameters drawn from `seed` (He-normal for ReLU layers, Glorot for the others, zero biases,
// unit layer-norm scales).
ArrayDict init_model(const ModelSpec& spec, uint64_t seed);

// Logits [batch, 10]. `key` (u32[2]) drives dropout when `training`; evaluation passes none.
Tensor model_logits(const ModelSpec& spec, const Params& p, const Tensor& images, bool training,
                    const Tensor& key = Tensor());

// The spec the options name (options.model, layers, dropout). Throws std::invalid_argument
// for a name other than mlp, cnn or vit.
ModelSpec model_spec(const training::TrainOptions& options);
// The trainer's model for `spec`: the MLP takes f32 pixels (784 = layers.front() inputs), the
// CNN and the ViT take the file's u8 bytes and draw dropout keys.
training::Model classifier(const ModelSpec& spec);
// mlp, cnn and vit, for training::train_main.
training::ModelMenu model_menu();

}  // namespace fjit::examples
