// The models of bench/model_step.cc and bench/lm_step.cc written with LibTorch's C++ API
// (torch::nn modules and ATen's functional ops), the way a LibTorch user writes them: the
// MLPs, the CNN and the ViT of examples/lib/models.h, and the decoder of core/nn/decoder.h.
// Same shapes and dtypes; NCHW where fjit is NHWC, and Linear's [out, in] weights where fjit's
// are [in, out]: load() converts fjit's parameters (names as fjit's initializers write them,
// read from bench/array_file.h's files) to these layouts, so that both start from the same
// numbers.
//
// Only this header and bench/libtorch_step.cc include LibTorch; neither includes fjit.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace libtorch_bench {

using Named = std::map<std::string, torch::Tensor>;

inline torch::Tensor take(const Named& p, const std::string& name) {
  auto it = p.find(name);
  if (it == p.end()) throw std::runtime_error("libtorch_step: the parameter file has no " + name);
  return it->second;
}

// dst <- src, outside autograd; the shapes must agree.
inline void assign(const torch::Tensor& dst, const torch::Tensor& src, const std::string& name) {
  if (dst.sizes() != src.sizes())
    throw std::runtime_error("libtorch_step: " + name + " has shape " + c10::str(src.sizes()) +
                             ", the module's parameter " + c10::str(dst.sizes()));
  torch::NoGradGuard no_grad;
  dst.copy_(src);
}

// fjit's dense layer "<name>/w" [in, out], "<name>/b" into a torch Linear.
inline void load_linear(torch::nn::Linear& l, const Named& p, const std::string& w, const std::string& b) {
  assign(l->weight, take(p, w).t(), w);
  assign(l->bias, take(p, b), b);
}

// prefix + k, built with append(): GCC 12 warns falsely (-Wrestrict) on "literal" + to_string.
inline std::string indexed(const char* prefix, size_t k) { return std::string(prefix).append(std::to_string(k)); }

inline torch::Tensor maybe_dropout(const torch::Tensor& x, double rate, bool training) {
  return training && rate > 0 ? torch::dropout(x, rate, true) : x;
}

// MLP sizes {in, h1, ..., out}, ReLU between layers (fjit: "w1", "b1", ...).
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const std::vector<int64_t>& sizes) {
    for (size_t k = 1; k < sizes.size(); ++k)
      layers.push_back(register_module(indexed("fc", k), torch::nn::Linear(sizes[k - 1], sizes[k])));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t k = 0; k < layers.size(); ++k) {
      x = layers[k](x);
      if (k + 1 < layers.size()) x = torch::relu(x);
    }
    return x;
  }
  void load(const Named& p) {
    for (size_t k = 0; k < layers.size(); ++k)
      load_linear(layers[k], p, indexed("w", k + 1), indexed("b", k + 1));
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

// u8 pixels [B, 784] -> f32 [B, 1, 28, 28] in [0, 1], cast inside the step as fjit's.
inline torch::Tensor images(const torch::Tensor& x) {
  return x.to(torch::kFloat).div(255.0).view({x.size(0), 1, 28, 28});
}

// Three 3x3 SAME convolutions (32, 64, 128) with ReLU and 2x2 max pools (the last one SAME:
// 7x7 -> 4x4, as ceil_mode), dropout rate/2, dense 128 ReLU, dropout rate, dense 10.
struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(double dropout) : rate(dropout) {
    using torch::nn::Conv2dOptions;
    conv1 = register_module("conv1", torch::nn::Conv2d(Conv2dOptions(1, 32, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(Conv2dOptions(32, 64, 3).padding(1)));
    conv3 = register_module("conv3", torch::nn::Conv2d(Conv2dOptions(64, 128, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(4 * 4 * 128, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::max_pool2d(torch::relu(conv1(images(x))), 2, 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2, 2);
    h = torch::max_pool2d(torch::relu(conv3(h)), {2, 2}, {2, 2}, {0, 0}, {1, 1}, /*ceil_mode=*/true);
    h = maybe_dropout(h.flatten(1), rate / 2, is_training());
    h = maybe_dropout(torch::relu(fc1(h)), rate, is_training());
    return fc2(h);
  }
  void load(const Named& p) {
    for (auto [conv, name] : {std::pair{conv1, "conv1"}, {conv2, "conv2"}, {conv3, "conv3"}}) {
      const std::string n = name;
      assign(conv->weight, take(p, n + "/w").permute({3, 2, 0, 1}), n + "/w");  // HWIO -> OIHW
      assign(conv->bias, take(p, n + "/b"), n + "/b");
    }
    // fjit flattens [4, 4, 128] (NHWC), torch [128, 4, 4] (NCHW).
    assign(fc1->weight, take(p, "fc1/w").view({4, 4, 128, 128}).permute({3, 2, 0, 1}).reshape({128, -1}), "fc1/w");
    assign(fc1->bias, take(p, "fc1/b"), "fc1/b");
    load_linear(fc2, p, "fc2/w", "fc2/b");
  }
  double rate;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

// The pre-norm transformer block of core/nn/transformer.h: x + drop(attn(ln1(x))), then
// x + drop(mlp(ln2(x))), attention by scaled_dot_product_attention, exact GELU.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t dim, int64_t heads, int64_t hidden, bool causal, double dropout)
      : heads(heads), causal(causal), rate(dropout) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5)));
    qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
    out = register_module("out", torch::nn::Linear(dim, dim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5)));
    fc = register_module("fc", torch::nn::Linear(dim, hidden));
    proj = register_module("proj", torch::nn::Linear(hidden, dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    torch::Tensor q = qkv(ln1(x)).view({b, t, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    torch::Tensor a = torch::scaled_dot_product_attention(q[0], q[1], q[2], {}, 0.0, causal);
    x = x + maybe_dropout(out(a.transpose(1, 2).reshape({b, t, d})), rate, is_training());
    return x + maybe_dropout(proj(torch::gelu(fc(ln2(x)))), rate, is_training());
  }
  void load(const Named& p, const std::string& n) {
    assign(ln1->weight, take(p, n + "/norm1/g"), n + "/norm1/g");
    assign(ln1->bias, take(p, n + "/norm1/b"), n + "/norm1/b");
    load_linear(qkv, p, n + "/attn/qkv/w", n + "/attn/qkv/b");
    load_linear(out, p, n + "/attn/out/w", n + "/attn/out/b");
    assign(ln2->weight, take(p, n + "/norm2/g"), n + "/norm2/g");
    assign(ln2->bias, take(p, n + "/norm2/b"), n + "/norm2/b");
    load_linear(fc, p, n + "/mlp/fc/w", n + "/mlp/fc/b");
    load_linear(proj, p, n + "/mlp/proj/w", n + "/mlp/proj/b");
  }
  int64_t heads;
  bool causal;
  double rate;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, out{nullptr}, fc{nullptr}, proj{nullptr};
};
TORCH_MODULE(Block);

// 7x7 patches (16 tokens) embedded to 64 with learned positions, 4 blocks (4 heads, MLP 128),
// layer norm, mean over tokens, dense 10.
struct VitImpl : torch::nn::Module {
  explicit VitImpl(double dropout) {
    embed = register_module("embed", torch::nn::Linear(49, 64));
    pos = register_parameter("pos", torch::randn({16, 64}) * 0.02);
    for (int k = 0; k < 4; ++k)
      blocks.push_back(register_module(indexed("block", k), Block(64, 4, 128, false, dropout)));
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({64}).eps(1e-5)));
    head = register_module("head", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0);
    torch::Tensor cols = images(x).view({b, 4, 7, 4, 7}).permute({0, 1, 3, 2, 4}).reshape({b * 16, 49});
    torch::Tensor h = embed(cols).view({b, 16, 64}) + pos;
    for (auto& block : blocks) h = block(h);
    return head(ln(h).mean(1));
  }
  void load(const Named& p) {
    load_linear(embed, p, "embed/w", "embed/b");
    assign(pos, take(p, "pos"), "pos");
    for (size_t k = 0; k < blocks.size(); ++k) blocks[k]->load(p, indexed("block", k));
    assign(ln->weight, take(p, "ln/g"), "ln/g");
    assign(ln->bias, take(p, "ln/b"), "ln/b");
    load_linear(head, p, "head/w", "head/b");
  }
  torch::nn::Linear embed{nullptr}, head{nullptr};
  torch::Tensor pos;
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(Vit);

// The GPT-style decoder: token table, learned positions, causal pre-norm blocks (MLP 4 dim),
// final layer norm, logits through the token table (tied).
struct DecoderImpl : torch::nn::Module {
  DecoderImpl(int64_t vocab, int64_t context, int64_t dim, int64_t layers, int64_t heads) {
    tok = register_module("tok", torch::nn::Embedding(vocab, dim));
    pos = register_parameter("pos", torch::randn({context, dim}) * 0.02);
    for (int64_t k = 0; k < layers; ++k)
      blocks.push_back(register_module(indexed("block", k), Block(dim, heads, 4 * dim, true, 0.0)));
    ln = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5)));
  }
  torch::Tensor forward(const torch::Tensor& ids) {  // i64 [B, T] -> [B, T, vocab]
    torch::Tensor x = tok(ids) + pos.slice(0, 0, ids.size(1));
    for (auto& block : blocks) x = block(x);
    return torch::matmul(ln(x), tok->weight.t());
  }
  void load(const Named& p) {
    assign(tok->weight, take(p, "tok/table"), "tok/table");
    assign(pos, take(p, "pos/table"), "pos/table");
    for (size_t k = 0; k < blocks.size(); ++k) blocks[k]->load(p, indexed("block", k));
    assign(ln->weight, take(p, "norm/g"), "norm/g");
    assign(ln->bias, take(p, "norm/b"), "norm/b");
  }
  torch::nn::Embedding tok{nullptr};
  torch::Tensor pos;
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(Decoder);

}  // namespace libtorch_bench
