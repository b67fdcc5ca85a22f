// Checkpoints against a model and a run: compatibility, configuration, and the naming of
// periodic checkpoints in a directory (core/io/checkpoint.h).
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <stdexcept>
#include <string_view>

#include "core/io/checkpoint.h"

namespace fjit::io {
namespace {

constexpr std::string_view kConfigPrefix = "config.";

std::string where(const Checkpoint& ckpt) {
  return ckpt.path.empty() ? std::string("checkpoint") : ckpt.path;
}

std::string joined(const std::vector<std::string>& lines, const char* sep) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : sep) + l;
  return out;
}

}  // namespace

void check_compatible(const Checkpoint& ckpt, const NamedArrays& expected) {
  std::vector<std::string> problems;
  for (const auto& [name, want] : expected) {
    const std::string want_type = type_str(want.dtype(), want.shape());
    const Array* have = ckpt.find(name);
    if (!have)
      problems.push_back("it lacks " + name + ", model expects " + want_type);
    else if (have->dtype() != want.dtype() || have->shape() != want.shape())
      problems.push_back("checkpoint has " + name + " " + type_str(have->dtype(), have->shape()) +
                         ", model expects " + want_type);
  }
  for (const auto& [name, have] : ckpt.tensors) {
    const bool known = std::any_of(expected.begin(), expected.end(),
                                   [&](const auto& e) { return e.first == name; });
    if (!known)
      problems.push_back("checkpoint has " + name + " " + type_str(have.dtype(), have.shape()) +
                         ", which the model does not expect");
  }
  if (!problems.empty())
    throw std::runtime_error(where(ckpt) + ": incompatible checkpoint: " + joined(problems, "; "));
}

void set_config(Checkpoint& ckpt, const RunConfig& config) {
  for (auto it = ckpt.metadata.begin(); it != ckpt.metadata.end();)
    it = it->first.starts_with(kConfigPrefix) ? ckpt.metadata.erase(it) : std::next(it);
  for (const auto& [key, value] : config) ckpt.metadata[std::string(kConfigPrefix) + key] = value;
}

RunConfig config_of(const Checkpoint& ckpt) {
  RunConfig out;
  for (const auto& [key, value] : ckpt.metadata)
    if (key.starts_with(kConfigPrefix)) out[key.substr(kConfigPrefix.size())] = value;
  return out;
}

std::vector<std::string> config_differences(const Checkpoint& ckpt, const RunConfig& current) {
  const RunConfig saved = config_of(ckpt);
  std::vector<std::string> out;
  auto show = [](const RunConfig& c, const std::string& key) {
    auto it = c.find(key);
    return it == c.end() ? std::string("(not set)") : it->second;
  };
  RunConfig keys = saved;
  keys.insert(current.begin(), current.end());
  for (const auto& [key, _] : keys)
    if (show(saved, key) != show(current, key))
      out.push_back(key + ": checkpoint " + show(saved, key) + ", now " + show(current, key));
  return out;
}

void check_config(const Checkpoint& ckpt, const RunConfig& current,
                  const std::string& override_hint) {
  const std::vector<std::string> diff = config_differences(ckpt, current);
  if (diff.empty()) return;
  throw std::runtime_error(where(ckpt) + ": this run's configuration differs from the checkpoint's: " +
                           joined(diff, "; ") + (override_hint.empty() ? "" : "; " + override_hint));
}

void check_model(const Checkpoint& ckpt, const std::string& model) {
  const RunConfig saved = config_of(ckpt);
  auto it = saved.find("model");
  const std::string have = it == saved.end() ? std::string("(not recorded)") : it->second;
  if (have != model)
    throw std::runtime_error(where(ckpt) + ": the checkpoint holds model " + have +
                             ", this run's is " + model + ": it cannot be resumed with another model");
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (std::filesystem::path(dir) / ("ckpt-" + std::to_string(step) + ".safetensors")).string();
}

std::string latest_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string best;
  int64_t best_step = -1;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view prefix = "ckpt-", suffix = ".safetensors";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix))
      continue;
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const int64_t step = std::stoll(digits);
    if (step > best_step) {
      best_step = step;
      best = it->path().string();
    }
  }
  return best;
}

}  // namespace fjit::io

namespace fjit::io {

int64_t metadata_int(const Checkpoint& ckpt, const std::string& key) {
  auto it = ckpt.metadata.find(key);
  if (it == ckpt.metadata.end())
    throw std::runtime_error(where(ckpt) + ": not a training checkpoint (no metadata '" + key + "')");
  int64_t v = -1;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty() || v < 0)
    throw std::runtime_error(where(ckpt) + ": metadata '" + key + "' = '" + s +
                             "' is not a non-negative integer");
  return v;
}

std::string metadata_str(const Checkpoint& ckpt, const std::string& key) {
  auto it = ckpt.metadata.find(key);
  return it == ckpt.metadata.end() ? std::string() : it->second;
}

}  // namespace fjit::io
