#include "parallel/train/verify.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "core/io/state_hash.h"

namespace fjit::training {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t pos = 0;
  for (;;) {
    const size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) return out;
    pos = next + 1;
  }
}

// The first element where a and b differ bitwise, or -1.
int64_t first_difference(const Array& a, const Array& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return 0;
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  const size_t width = static_cast<size_t>(dtype_size(a.dtype()));
  for (int64_t i = 0; i < a.size(); ++i)
    if (std::memcmp(pa + i * width, pb + i * width, width) != 0) return i;
  return -1;
}

io::Checkpoint load_link(const std::string& path) {
  io::Checkpoint ck = io::load_checkpoint(path);
  io::require_checksum(ck, "so it cannot be verified");
  io::verify_chain(ck, io::metadata_int(ck, "step"));
  return ck;
}

}  // namespace

VerifyResult verify_interval(const std::string& from, const std::string& to, const TrainerFactory& make) {
  std::unique_ptr<Trainer> trainer;  // built when the checkpoints have passed their checks
  auto t = [&]() -> Trainer& {
    if (!trainer) trainer = make();
    return *trainer;
  };
  return verify_interval(from, to,
                         Replay{.load = [&](const std::string& path) { t().load(path); },
                                .steps_done = [&] { return t().steps_done(); },
                                .step = [&] { return t().step().has_value(); },
                                .last_record = [&] { return t().step_records().back(); },
                                .state = [&] {
                                  return checkpoint_tensors(t().params(), t().whole_optimizer_state());
                                }});
}

VerifyResult verify_interval(const std::string& from, const std::string& to, const Replay& replay) {
  const io::Checkpoint a = load_link(from), b = load_link(to);
  VerifyResult r;
  r.from = from;
  r.to = to;
  r.from_step = io::metadata_int(a, "step");
  r.to_step = io::metadata_int(b, "step");
  if (r.to_step <= r.from_step)
    throw std::runtime_error(fmt::format("{}: step {} does not follow {} (step {})", to, r.to_step, from, r.from_step));
  if (io::metadata_str(b, io::kChainPrevKey) != io::metadata_str(a, io::kChainKey))
    throw std::runtime_error(fmt::format("{}: its chain does not continue {} ({} is {}, the earlier "
                                         "link is {})", to, from, io::kChainPrevKey,
                                         io::metadata_str(b, io::kChainPrevKey),
                                         io::metadata_str(a, io::kChainKey)));
  replay.load(from);
  const std::vector<std::string> recorded = split(io::metadata_str(b, "step_records"), ',');
  size_t k = 0;
  while (replay.steps_done() < r.to_step && replay.step()) {
    const std::string mine = replay.last_record();
    if (r.first_diverging_step < 0 && (k >= recorded.size() || recorded[k] != mine))
      r.first_diverging_step = replay.steps_done();
    ++k;
  }
  if (replay.steps_done() != r.to_step)
    throw std::runtime_error(fmt::format("{}: the re-execution ended at step {}, before step {}", to,
                                         replay.steps_done(), r.to_step));
  if (r.first_diverging_step < 0 && k != recorded.size()) r.first_diverging_step = r.from_step + 1;
  const io::NamedArrays now = replay.state();
  for (const auto& [name, saved] : b.tensors) {
    auto it = std::find_if(now.begin(), now.end(), [&](const auto& t) { return t.first == name; });
    const int64_t at = it == now.end() ? 0 : first_difference(saved, it->second);
    if (at >= 0) {
      r.first_diverging_tensor = name;
      r.first_diverging_element = at;
      break;
    }
  }
  r.identical = r.first_diverging_step < 0 && r.first_diverging_tensor.empty();
  r.summary = r.identical
                  ? fmt::format("{} -> {}: steps {}..{} re-executed bit-identical (chain {})", from, to,
                                r.from_step + 1, r.to_step, io::metadata_str(b, io::kChainKey).substr(0, 16))
                  : fmt::format("{} -> {}: DIVERGES: first diverging step {}, first diverging tensor {} "
                                "(element {})", from, to, r.first_diverging_step,
                                r.first_diverging_tensor.empty() ? "(none)" : r.first_diverging_tensor,
                                r.first_diverging_element);
  return r;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("ckpt-") || !name.ends_with(".safetensors")) continue;
    const std::string digits = name.substr(5, name.size() - 5 - 12);
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    out.emplace_back(std::stoll(digits), it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fjit::training
