// Command-line options of the training examples, and their small parser.
//
// Every option takes a value ("--epochs 10" or "--epochs=10") except --resume and --help.
// parse_train_options never exits: it returns what to do, and the program prints the usage or
// the error and picks the exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/check_site.h"

namespace fjit::examples {

struct TrainOptions {
  int64_t epochs = 10;
  int64_t batch_size = 128;          // global: split over every replica of the mesh
  double lr = 1e-3;                  // peak learning rate
  bool cosine_schedule = true;       // lr * (1 + cos(pi * step / all steps)) / 2; else constant
  double weight_decay = 1e-4;
  double max_grad_norm = 1e3;        // a step whose gradient norm reaches this fails its check
  uint64_t seed = 0;
  int replicas = 1;                  // informational: Mesh::from_environment reads --replicas
  std::string data_dir;              // empty: Debian's /usr/share/datasets/fashion-mnist
  std::string checkpoint_dir;        // empty: no checkpoints
  int64_t checkpoint_every = 0;      // steps between checkpoints; 0: only at the end
  bool resume = false;               // start from the latest checkpoint in checkpoint_dir
  // Unset: fjit's process defaults (FJIT_CHECKS, else user; FJIT_ON_CHECK_FAILURE, else throw).
  std::optional<CheckMode> checks;
  std::optional<CheckPolicy> on_check_failure;
  int64_t log_every = 100;           // steps between progress lines; 0: epoch lines only
  int64_t max_steps = -1;            // stop after this many steps in all (-1: no limit)
  int64_t eval_batch_size = 1000;
  int divergence_check_every = 0;    // compare replicas' parameters every K steps (0: off)
  std::vector<int64_t> layers = {784, 512, 256, 10};
};

struct ParsedOptions {
  TrainOptions options;
  bool help = false;
  std::string error;  // non-empty: the command line was wrong
};

// Parses argv[1..argc). Unknown options, missing or malformed values are errors.
ParsedOptions parse_train_options(int argc, char** argv, TrainOptions defaults = {});

// The --help text, with the defaults shown.
std::string train_usage(const char* program, const TrainOptions& defaults = {});

// A one-line summary of the options that shape the run (for the log).
std::string describe(const TrainOptions& o);

}  // namespace fjit::examples
