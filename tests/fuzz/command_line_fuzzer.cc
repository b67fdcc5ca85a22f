// Fuzzes the numbers users type: the training programs' command line (parse_train_options,
// parallel/train/train_options.h) and the replica and thread counts read from --replicas and
// FJIT_* variables (parse_count, core/base/env.h).
//
// The input is split at NUL bytes: the first piece is a count for parse_count, the rest are
// the command line's arguments after the program name.
//
// Checked for every input: no crash, leak or undefined behaviour; parse_count accepts
// exactly the decimal integers from 1 to its maximum (decided here digit by digit) and
// names the value's source when it refuses; a command line either fails with a message or
// yields options that keep every documented bound.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/env.h"
#include "parallel/train/train_options.h"
#include "tests/fuzz/fuzz_input.h"

using namespace fjit;

namespace {

constexpr int kMaxCount = 4096;

// The oracle for parse_count: only digits (leading zeros allowed, at any length), and a
// value in [1, kMaxCount].
bool is_count(std::string_view s) {
  if (s.empty()) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
    if (v > kMaxCount) return false;  // stops before the sum could overflow
  }
  return v >= 1;
}

void check_count(const std::string& text) {
  try {
    const int v = parse_count(text, "FJIT_FUZZ_COUNT", kMaxCount);
    if (!is_count(text) || std::to_string(v) != text.substr(text.find_first_not_of('0')))
      fuzz::fail("parse_count accepted '" + text + "' as " + std::to_string(v));
  } catch (const std::invalid_argument& e) {
    if (is_count(text)) fuzz::fail("parse_count refused '" + text + "'");
    if (!std::string_view(e.what()).starts_with("FJIT_FUZZ_COUNT "))
      fuzz::fail(std::string("parse_count's error does not name the variable: ") + e.what());
  }
}

void check_options(const training::TrainOptions& o) {
  const bool ok = o.epochs >= 1 && o.batch_size >= 1 && o.micro_batches >= 1 &&
                  o.warmup_steps >= 0 && o.replicas >= 1 && o.checkpoint_every >= 0 &&
                  o.log_every >= 0 && o.max_steps >= -1 && o.eval_batch_size >= 1 &&
                  o.divergence_check_every >= 0 && o.layers.size() >= 2 &&
                  std::isfinite(o.lr) && o.lr >= 0 && std::isfinite(o.weight_decay) &&
                  o.weight_decay >= 0 && std::isfinite(o.max_grad_norm) && o.max_grad_norm >= 0 &&
                  std::isfinite(o.dropout) && o.dropout >= 0 && o.dropout < 1 &&
                  (!o.resume || !o.checkpoint_dir.empty());
  bool layers_ok = true;
  for (int64_t n : o.layers) layers_ok = layers_ok && n >= 1;
  if (!ok || !layers_ok) fuzz::fail("parse_train_options accepted options outside their bounds");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) pieces.emplace_back();
    else pieces.back().push_back(static_cast<char>(data[i]));
  }
  check_count(pieces[0]);

  std::vector<char*> argv;
  std::string program = "train";
  argv.push_back(program.data());
  for (size_t i = 1; i < pieces.size(); ++i) argv.push_back(pieces[i].data());
  argv.push_back(nullptr);
  const training::ParsedOptions parsed =
      training::parse_train_options(static_cast<int>(argv.size() - 1), argv.data());
  if (parsed.error.empty() && !parsed.help) check_options(parsed.options);
  return 0;
}
