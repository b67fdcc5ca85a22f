// LoRA adapters on the host: adding, merging, selecting (see core/nn/lora.h).
#include "core/nn/lora.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/base/name_pattern.h"
#include "core/ir/convert.h"
#include "core/lib/initializers.h"

namespace fjit {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The linear layers of params: "<layer>" for each rank-2 "<layer>/w".
std::vector<std::string> linear_layers(const ArrayDict& params) {
  std::vector<std::string> layers;
  for (const auto& [name, a] : params)
    if (name.size() > 2 && ends_with(name, "/w") && a.rank() == 2)
      layers.push_back(name.substr(0, name.size() - 2));
  return layers;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

// A seed per layer from the user's seed and the layer's name (FNV-1a), so that adapting one
// more layer does not change the others' draws.
uint64_t layer_seed(uint64_t seed, const std::string& layer) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : layer) h = (h ^ ch) * 0x100000001b3ull;
  return SplitMix64(seed ^ h).next();
}

}  // namespace

bool is_lora_param(const std::string& name) {
  return ends_with(name, "/lora_a") || ends_with(name, "/lora_b") || ends_with(name, "/lora_scale");
}

ArrayDict lora_adapter(const ArrayDict& params) {
  ArrayDict out;
  for (const auto& [name, a] : params)
    if (is_lora_param(name)) out.set(name, a);
  return out;
}

std::vector<std::string> add_lora(ArrayDict& params, const LoraOptions& o) {
  if (o.rank < 1) throw std::invalid_argument(fmt::format("add_lora: rank must be >= 1, not {}", o.rank));
  if (!std::isfinite(o.alpha))
    throw std::invalid_argument(fmt::format("add_lora: alpha must be finite, not {}", o.alpha));
  const std::vector<std::string> layers = linear_layers(params);
  std::vector<std::string> chosen;
  for (const std::string& layer : layers)
    if (name_matches_any(o.targets, layer)) chosen.push_back(layer);
  if (chosen.empty())
    throw std::invalid_argument(fmt::format("add_lora: no linear layer matches the targets [{}]; the linear "
                                            "layers are: {}",
                                            joined(o.targets), joined(layers)));
  for (const std::string& layer : chosen)
    if (params.contains(layer + "/lora_a") || params.contains(layer + "/lora_b") ||
        params.contains(layer + "/lora_scale"))
      throw std::invalid_argument(fmt::format("add_lora: layer '{}' already has a LoRA adapter", layer));
  for (const std::string& layer : chosen) {
    const Shape& w = params.at(layer + "/w").shape();
    const int64_t in = w[0], out = w[1];
    Array a(DType::f32, {in, o.rank});
    SplitMix64 rng(layer_seed(o.seed, layer));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    for (int64_t i = 0; i < a.size(); ++i)
      a.data<float>()[i] = static_cast<float>((2 * rng.uniform() - 1) * bound);
    params.set(layer + "/lora_a", a);
    params.set(layer + "/lora_b", Array::zeros(DType::f32, {o.rank, out}));
    params.set(layer + "/lora_scale", Array::scalar(static_cast<float>(o.alpha / static_cast<double>(o.rank))));
  }
  return chosen;
}

void merge_lora(ArrayDict& params) {
  // Check every adapter before changing anything.
  std::vector<std::string> layers;
  for (const auto& [name, a] : params) {
    if (!is_lora_param(name)) continue;
    const std::string layer = name.substr(0, name.rfind('/'));
    if (!params.contains(layer + "/lora_a") || !params.contains(layer + "/lora_b") ||
        !params.contains(layer + "/lora_scale") || !params.contains(layer + "/w"))
      throw std::invalid_argument(fmt::format(
          "merge_lora: layer '{}' has an incomplete LoRA adapter (it needs {}/w, lora_a, lora_b and lora_scale)",
          layer, layer));
    if (ends_with(name, "/lora_a")) layers.push_back(layer);
  }
  ArrayDict merged;
  for (const std::string& layer : layers) {
    const Array &w = params.at(layer + "/w"), &a = params.at(layer + "/lora_a"), &b = params.at(layer + "/lora_b");
    const Array& s = params.at(layer + "/lora_scale");
    if (w.rank() != 2 || a.rank() != 2 || b.rank() != 2 || s.size() != 1 || a.shape()[0] != w.shape()[0] ||
        a.shape()[1] != b.shape()[0] || b.shape()[1] != w.shape()[1])
      throw std::invalid_argument(fmt::format(
          "merge_lora: layer '{}': w {} needs lora_a [{}, r], lora_b [r, {}] and a scalar lora_scale", layer,
          type_str(w.dtype(), w.shape()), w.rank() == 2 ? w.shape()[0] : -1, w.rank() == 2 ? w.shape()[1] : -1));
    const int64_t in = w.shape()[0], out = w.shape()[1], r = a.shape()[1];
    const double scale = s.item_as_double();
    std::vector<double> av(a.size()), bv(b.size()), row(out);
    for (int64_t i = 0; i < a.size(); ++i) av[i] = a.at_as_double(i);
    for (int64_t i = 0; i < b.size(); ++i) bv[i] = b.at_as_double(i);
    Array fused(w.dtype(), w.shape());  // new storage: w's may be shared with other dicts
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t j = 0; j < out; ++j) row[j] = 0;
      for (int64_t k = 0; k < r; ++k)
        for (int64_t j = 0; j < out; ++j) row[j] += av[i * r + k] * bv[k * out + j];
      for (int64_t j = 0; j < out; ++j)
        set_element_from_double(w.dtype(), fused.raw(), i * out + j, w.at_as_double(i * out + j) + scale * row[j]);
    }
    merged.set(layer + "/w", fused);
  }
  ArrayDict out;
  for (const auto& [name, a] : params)
    if (!is_lora_param(name)) out.set(name, merged.contains(name) ? merged.at(name) : a);
  params = out;
}

}  // namespace fjit
