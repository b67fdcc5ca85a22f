#include "lib/train_options.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <functional>
#include <map>

#include "core/runtime/jit_core.h"

namespace fjit::examples {
namespace {

template <class T>
bool parse_number(const std::string& s, T& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && !s.empty();
}

bool parse_layers(const std::string& s, std::vector<int64_t>& out) {
  out.clear();
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    int64_t v = 0;
    if (!parse_number(s.substr(pos, comma - pos), v) || v < 1) return false;
    out.push_back(v);
    pos = comma + 1;
  }
  return out.size() >= 2;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

ParsedOptions parse_train_options(int argc, char** argv, TrainOptions defaults) {
  ParsedOptions r;
  r.options = std::move(defaults);
  TrainOptions& o = r.options;
  // Each handler parses the value; returns "" or what a valid value looks like.
  using Handler = std::function<std::string(const std::string&)>;
  auto positive = [](int64_t& field, int64_t min) {
    return [&field, min](const std::string& v) -> std::string {
      return parse_number(v, field) && field >= min ? "" : "an integer >= " + std::to_string(min);
    };
  };
  auto real = [](double& field) {
    return [&field](const std::string& v) -> std::string {
      return parse_number(v, field) && field >= 0 ? "" : "a number >= 0";
    };
  };
  auto text = [](std::string& field) {
    return [&field](const std::string& v) -> std::string { field = v; return ""; };
  };
  const std::map<std::string, Handler> handlers = {
      {"--epochs", positive(o.epochs, 1)},
      {"--batch-size", positive(o.batch_size, 1)},
      {"--lr", real(o.lr)},
      {"--weight-decay", real(o.weight_decay)},
      {"--lr-schedule", [&](const std::string& v) -> std::string {
         if (v != "cosine" && v != "constant") return "cosine or constant";
         o.cosine_schedule = v == "cosine";
         return "";
       }},
      {"--max-grad-norm", real(o.max_grad_norm)},
      {"--seed", [&](const std::string& v) -> std::string {
         return parse_number(v, o.seed) ? "" : "an unsigned integer";
       }},
      {"--replicas", [&](const std::string& v) -> std::string {
         return parse_number(v, o.replicas) && o.replicas >= 1 ? "" : "an integer >= 1";
       }},
      {"--data-dir", text(o.data_dir)},
      {"--checkpoint-dir", text(o.checkpoint_dir)},
      {"--checkpoint-every", positive(o.checkpoint_every, 0)},
      {"--checks", [&](const std::string& v) -> std::string {
         if (v == "off") o.checks = CheckMode::off;
         else if (v == "user") o.checks = CheckMode::user;
         else if (v == "all") o.checks = CheckMode::all;
         else return "off, user or all";
         return "";
       }},
      {"--on-check-failure", [&](const std::string& v) -> std::string {
         if (v == "throw") o.on_check_failure = CheckPolicy::throw_error;
         else if (v == "skip_step") o.on_check_failure = CheckPolicy::skip_step;
         else if (v == "log") o.on_check_failure = CheckPolicy::log;
         else return "throw, skip_step or log";
         return "";
       }},
      {"--log-every", positive(o.log_every, 0)},
      {"--max-steps", positive(o.max_steps, 0)},
      {"--eval-batch-size", positive(o.eval_batch_size, 1)},
      {"--divergence-check-every", [&](const std::string& v) -> std::string {
         return parse_number(v, o.divergence_check_every) && o.divergence_check_every >= 0
                    ? "" : "an integer >= 0";
       }},
      {"--layers", [&](const std::string& v) -> std::string {
         return parse_layers(v, o.layers) ? "" : "sizes like 784,512,256,10";
       }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help" || arg == "-h") { r.help = true; continue; }
    if (arg == "--resume") { o.resume = true; continue; }
    bool has_value = false;
    if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto it = handlers.find(arg);
    if (it == handlers.end()) {
      r.error = "unknown option '" + arg + "' (see --help)";
      return r;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        r.error = "option " + arg + " needs a value";
        return r;
      }
      value = argv[++i];
    }
    if (std::string want = it->second(value); !want.empty()) {
      r.error = "option " + arg + ": '" + value + "' is not " + want;
      return r;
    }
  }
  if (o.resume && o.checkpoint_dir.empty()) r.error = "--resume needs --checkpoint-dir";
  return r;
}

std::string train_usage(const char* program, const TrainOptions& d) {
  return fmt::format(
      "usage: {0} [options]\n"
      "       mpirun -np N {0} [options]   (one replica per rank)\n\n"
      "Trains an MLP classifier on Fashion-MNIST, data-parallel over the replicas.\n\n"
      "  --epochs N                 epochs to train ({1})\n"
      "  --batch-size N             global batch, split over the replicas ({2})\n"
      "  --lr X                     AdamW (peak) learning rate ({3})\n"
      "  --lr-schedule S            cosine (decays to 0 over all epochs) or constant (cosine)\n"
      "  --weight-decay X           AdamW decoupled weight decay ({4})\n"
      "  --max-grad-norm X          a gradient norm at or above this fails a check ({5})\n"
      "  --seed N                   seed of the initial parameters and the data order ({6})\n"
      "  --replicas N               thread replicas without mpirun (1; FJIT_REPLICAS)\n"
      "  --data-dir DIR             {{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte[.gz] files\n"
      "                             (default /usr/share/datasets/fashion-mnist)\n"
      "  --layers A,B,...           layer sizes ({7})\n"
      "  --checkpoint-dir DIR       write checkpoints here (none)\n"
      "  --checkpoint-every N       steps between checkpoints; 0 = at the end only ({8})\n"
      "  --resume                   continue from the latest checkpoint in --checkpoint-dir\n"
      "  --checks off|user|all      checks compiled into the step (FJIT_CHECKS, else user)\n"
      "  --on-check-failure throw|skip_step|log   what a failed check does\n"
      "                             (FJIT_ON_CHECK_FAILURE, else throw)\n"
      "  --log-every N              steps between progress lines; 0 = per epoch only ({9})\n"
      "  --max-steps N              stop after N steps in all (no limit)\n"
      "  --eval-batch-size N        test-set evaluation batch ({10})\n"
      "  --divergence-check-every K compare replicas' parameters every K steps (0 = off)\n"
      "  --help                     this text\n\n"
      "Environment: FJIT_LOG_LEVEL, FJIT_CHECKS, FJIT_ON_CHECK_FAILURE, FJIT_DUMP_DIR, ...\n",
      program, d.epochs, d.batch_size, d.lr, d.weight_decay, d.max_grad_norm, d.seed,
      join(d.layers), d.checkpoint_every, d.log_every,
      d.eval_batch_size);
}

std::string describe(const TrainOptions& o) {
  return fmt::format("layers {} | epochs {} | global batch {} | AdamW lr {} ({}) wd {} | seed {} | "
                     "checks {} on failure {}",
                     join(o.layers), o.epochs, o.batch_size, o.lr,
                     o.cosine_schedule ? "cosine" : "constant", o.weight_decay, o.seed,
                     check_mode_name(o.checks.value_or(default_check_mode())),
                     check_policy_name(o.on_check_failure.value_or(default_check_policy())));
}

}  // namespace fjit::examples
