// The fjit half of bench/hf_compare.py: loads a Hugging Face model directory
// (core/hf/hf_checkpoint.h), computes the logits of a batch and the gradients of its mean
// cross entropy in f32, and writes them with the gradients under HF's names and layouts (the
// export mapping), for the script to compare with transformers' forward and backward.
//
//   build/bench/hf_eval <hf dir> <batch.safetensors> <out.safetensors> [--save <dir>] [--lora <dir>]
//
// batch.safetensors holds "ids" and "targets" (i32 [B, T]). out.safetensors gets "logits"
// f32 [B, T, vocab], "loss" f32 [] and "grad.<HF tensor name>" for every tensor
// save_hf_model writes. --save also writes the imported model back with save_hf_model (the
// parameters as stored), for the script's round trip through from_pretrained. --lora gives
// every attention qkv and out and the first MLP layer of each block a rank-2 adapter with
// fixed pseudo-random values, writes them with save_peft_adapter, and adds "lora_logits": the
// logits with the adapters merged into the weights (W + s A B, on the host in f64).
#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>

#include "parallel/fjit.h"

using namespace fjit;

namespace {

Array as_f32(const Array& a) {
  if (a.dtype() == DType::f32) return a;
  Array out(DType::f32, a.shape());
  for (int64_t i = 0; i < a.size(); ++i) out.data<float>()[i] = static_cast<float>(a.at_as_double(i));
  return out;
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Adapters on the layers above, added to `with_lora`; `merged` gets W + s A B.
void add_adapters(ArrayDict& with_lora, ArrayDict& merged, const DecoderConfig& c) {
  const int64_t r = 2;
  const double s = 1.5;
  uint64_t n = 1;
  auto values = [&](Shape shape) {
    Array a(DType::f32, shape);
    for (int64_t i = 0; i < a.size(); ++i)
      a.data<float>()[i] = static_cast<float>(static_cast<double>(mix(++n) % 2001) / 1000.0 - 1.0) * 0.1f;
    return a;
  };
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* l : {"attn/qkv", "attn/out", c.rotary ? "mlp/gate" : "mlp/fc"}) {
      const std::string layer = "block" + std::to_string(i) + "/" + l;
      Array w = merged.at(layer + "/w").clone();
      const int64_t in = w.shape()[0], out = w.shape()[1];
      Array a = values({in, r}), b = values({r, out});
      for (int64_t x = 0; x < in; ++x)
        for (int64_t y = 0; y < out; ++y) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k)
            d += static_cast<double>(a.data<float>()[x * r + k]) * b.data<float>()[k * out + y];
          w.data<float>()[x * out + y] = static_cast<float>(w.data<float>()[x * out + y] + s * d);
        }
      merged.set(layer + "/w", w);
      with_lora.set(layer + "/lora_a", a);
      with_lora.set(layer + "/lora_b", b);
      with_lora.set(layer + "/lora_scale", Array::scalar(static_cast<float>(s)));
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::string save_dir, lora_dir;
  bool usage = argc < 4 || argc % 2 != 0;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--save") save_dir = argv[i + 1];
    else if (flag == "--lora") lora_dir = argv[i + 1];
    else usage = true;
  }
  if (usage) {
    std::fprintf(stderr, "usage: %s <hf dir> <batch.safetensors> <out.safetensors> [--save <dir>] [--lora <dir>]\n",
                 argv[0]);
    return 2;
  }
  try {
    const hf::HfModel model = hf::load_hf_model(argv[1]);
    std::printf("%s\n", hf::describe(model).c_str());
    if (!save_dir.empty()) hf::save_hf_model(save_dir, model);
    ArrayDict params;
    for (const auto& [name, a] : model.params) params.set(name, as_f32(a));
    const io::Checkpoint batch = io::load_checkpoint(argv[2]);
    const Array* ids = batch.find("ids");
    const Array* targets = batch.find("targets");
    if (!ids || !targets) throw std::runtime_error(std::string(argv[2]) + ": needs \"ids\" and \"targets\"");
    const DecoderConfig c = model.config;
    auto step = jit([c](const Params& p, const Tensor& x, const Tensor& y) {
      auto loss_fn = [&](const Params& q) { return mean(softmax_cross_entropy(decoder_logits(q, c, x), y)); };
      auto [loss, g] = value_and_grad(loss_fn)(p);
      return std::tuple{decoder_logits(p, c, x), loss, g};
    }, JitOptions{.name = "hf_eval"});
    auto [logits, loss, grads] = step(params, *ids, *targets);
    io::Checkpoint out;
    out.tensors.emplace_back("logits", logits);
    out.tensors.emplace_back("loss", loss);
    for (auto& [name, g] : hf::hf_tensors(model, grads)) out.tensors.emplace_back("grad." + name, g);
    if (!lora_dir.empty()) {
      hf::HfModel with_lora = model;
      ArrayDict merged = params;
      add_adapters(with_lora.params, merged, c);
      hf::save_peft_adapter(lora_dir, with_lora, argv[1]);
      out.tensors.emplace_back("lora_logits", std::get<0>(step(merged, *ids, *targets)));
    }
    io::save_checkpoint(argv[3], out);
    std::printf("loss %.6f\n", loss.item<double>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_eval: %s\n", e.what());
    return 1;
  }
  return 0;
}
