// LoRA adapters exported in PEFT's layout (core/hf/hf_checkpoint.h: save_peft_adapter).
//
// fjit's adapter on a linear layer with weight W [in, out] adds x A B * s, A [in, r],
// B [r, out], s = alpha / r. PEFT's adds lora_B(lora_A(x)) * lora_alpha / r with nn.Linear
// modules: lora_A.weight [r, in] = A^T, lora_B.weight [out, r] = B^T, whatever the layout of
// the base module (GPT-2's Conv1D [in, out] or nn.Linear [out, in]); fan_in_fan_out only tells
// PEFT how to merge into a Conv1D weight. A fused fjit weight that HF splits into modules
// (Llama's q, k, v) gives one adapter per module: the same A, and B's columns of that module.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/hf/hf_internal.h"
#include "core/io/atomic_file.h"

namespace fjit::hf {
namespace {

using namespace detail;
using Json = nlohmann::ordered_json;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// [rows, cols] -> [cols, rows], host bytes.
Array transposed(const Array& a) {
  const int64_t rows = a.shape()[0], cols = a.shape()[1];
  const size_t es = static_cast<size_t>(dtype_size(a.dtype()));
  Array out(a.dtype(), {cols, rows});
  const auto* src = static_cast<const std::byte*>(a.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) std::memcpy(dst + (j * rows + i) * es, src + (i * cols + j) * es, es);
  return out;
}

// Columns [begin, end) of a 2-D array.
Array columns(const Array& a, int64_t begin, int64_t end) {
  const int64_t rows = a.shape()[0], cols = a.shape()[1], n = end - begin;
  const size_t es = static_cast<size_t>(dtype_size(a.dtype()));
  Array out(a.dtype(), {rows, n});
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(static_cast<std::byte*>(out.raw()) + i * n * es,
                static_cast<const std::byte*>(a.raw()) + (i * cols + begin) * es, n * es);
  return out;
}

std::string regex_escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '.') out += '\\';
    out += ch;
  }
  return out;
}

struct Adapter {
  std::string module;  // HF module name inside the causal-LM model
  Array a, b;          // lora_A.weight [r, in], lora_B.weight [out, r]
  int64_t r;
  double alpha;
};

}  // namespace

void save_peft_adapter(const std::string& dir, const HfModel& model, const std::string& base_model) {
  const std::vector<Mapping> maps = mappings(model.architecture, model.config);
  std::map<std::string, const Mapping*> by_weight;
  for (const Mapping& m : maps)
    if (m.shape.size() == 2 && ends_with(m.fjit, "/w")) by_weight[m.fjit] = &m;
  const std::string prefix = model_prefix(model.architecture);

  std::vector<Adapter> adapters;
  for (const auto& [name, lora_a] : model.params) {
    if (!ends_with(name, "/lora_a")) continue;
    const std::string layer = name.substr(0, name.size() - 7);
    auto need = [&](const std::string& n) -> const Array& {
      if (!model.params.contains(n))
        throw std::invalid_argument(fmt::format("save_peft_adapter: \"{}\" has no \"{}\"", name, n));
      return model.params.at(n);
    };
    const Array& lora_b = need(layer + "/lora_b");
    const Array& scale = need(layer + "/lora_scale");
    auto it = by_weight.find(layer + "/w");
    if (it == by_weight.end())
      throw std::invalid_argument(fmt::format(
          "save_peft_adapter: the adapter on \"{}\" sits on no linear layer of the {} model", layer,
          architecture_name(model.architecture)));
    const Mapping& m = *it->second;
    const int64_t in = m.shape[0], out = m.shape[1];
    if (lora_a.rank() != 2 || lora_a.shape()[0] != in || lora_b.rank() != 2 ||
        lora_b.shape()[0] != lora_a.shape()[1] || lora_b.shape()[1] != out || scale.size() != 1)
      throw std::invalid_argument(fmt::format(
          "save_peft_adapter: \"{}\": lora_a {}, lora_b {}, lora_scale {} do not fit the weight [{}, {}]", layer,
          type_str(lora_a.dtype(), lora_a.shape()), type_str(lora_b.dtype(), lora_b.shape()),
          type_str(scale.dtype(), scale.shape()), in, out));
    const int64_t r = lora_a.shape()[1];
    const Array a_t = transposed(lora_a);
    int64_t col = 0;
    for (const Part& p : m.parts) {
      // The part's output features: nn.Linear [out, in] rows, or Conv1D [in, out] columns.
      const int64_t n = m.transpose ? p.shape[0] : p.shape[1];
      const std::string weight = p.name == "lm_head.weight" ? p.name : prefix + p.name;
      adapters.push_back({weight.substr(0, weight.size() - 7), a_t, transposed(columns(lora_b, col, col + n)), r,
                          scale.item<double>() * static_cast<double>(r)});
      col += n;
    }
  }
  if (adapters.empty()) throw std::invalid_argument("save_peft_adapter: the model's params hold no LoRA adapter");

  // One r and alpha for all; the modules that differ go into PEFT's rank and alpha patterns.
  const int64_t r = adapters[0].r;
  const double alpha = adapters[0].alpha;
  auto number = [](double v) { return v == std::round(v) && std::abs(v) < 1e15 ? Json(static_cast<int64_t>(v)) : Json(v); };
  Json targets = Json::array(), ranks = Json::object(), alphas = Json::object();
  io::Checkpoint ck;
  ck.metadata = {{"format", "pt"}};
  for (const Adapter& ad : adapters) {
    targets.push_back(ad.module);
    if (ad.r != r) ranks[regex_escaped(ad.module)] = ad.r;
    if (ad.alpha != alpha) alphas[regex_escaped(ad.module)] = number(ad.alpha);
    ck.tensors.emplace_back("base_model.model." + ad.module + ".lora_A.weight", ad.a);
    ck.tensors.emplace_back("base_model.model." + ad.module + ".lora_B.weight", ad.b);
  }
  Json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base_model;
  j["revision"] = nullptr;
  j["inference_mode"] = true;
  j["r"] = r;
  j["lora_alpha"] = number(alpha);
  j["lora_dropout"] = 0.0;
  j["target_modules"] = targets;
  j["fan_in_fan_out"] = model.architecture == Architecture::kGpt2;  // Conv1D's [in, out]
  j["bias"] = "none";
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["modules_to_save"] = nullptr;
  j["init_lora_weights"] = true;
  j["layers_to_transform"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["rank_pattern"] = ranks;
  j["alpha_pattern"] = alphas;
  const std::string text = j.dump(2) + "\n";

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create the directory: " + ec.message());
  io::save_checkpoint(dir + "/adapter_model.safetensors", ck);
  io::AtomicFile out(dir + "/adapter_config.json");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace fjit::hf
