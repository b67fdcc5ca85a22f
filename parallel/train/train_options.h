// Command-line options of a training program, parsed with CLI11 (train_options.cc; what they
// mean for a run, from describe() on, is train_config.cc).
//
// Every option takes a value ("--epochs 10" or "--epochs=10") except the flags --resume,
// --allow-config-change and --help. Numbers are parsed strictly (the whole value, no
// trailing text, no silent wrap-around: "-1" is not an unsigned seed; rates and bounds are
// finite: "inf" and "nan" are refused). parse_train_options never exits: it returns what
// to do, and the program prints the usage or the error and picks the exit code (2 for a bad
// command line).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/check_site.h"
#include "core/io/checkpoint.h"
#include "core/lib/schedules.h"

namespace fjit::training {

struct TrainOptions {
  int64_t epochs = 10;
  int64_t batch_size = 128;          // global: split over every replica of the mesh
  int micro_batches = 1;             // gradient accumulation: micro-batches per step
  double lr = 1e-3;                  // peak learning rate
  std::string lr_schedule = "cosine";  // cosine (to 0 over the run), constant, or step
  int64_t warmup_steps = 0;          // linear warm-up before the schedule
  double weight_decay = 1e-4;
  double max_grad_norm = 1e3;        // a step whose gradient norm reaches this fails its check
  uint64_t seed = 0;
  int replicas = 1;                  // informational: Mesh::from_environment reads --replicas
  std::string data_dir;              // empty: Debian's /usr/share/datasets/fashion-mnist
  std::string checkpoint_dir;        // empty: no checkpoints
  int64_t checkpoint_every = 0;      // steps between checkpoints; 0: only at the end
  bool resume = false;               // start from the latest checkpoint in checkpoint_dir
  bool allow_config_change = false;  // resume even if the configuration differs
  // Unset: fjit's process defaults (FJIT_CHECKS, else user; FJIT_ON_CHECK_FAILURE, else throw).
  std::optional<CheckMode> checks;
  std::optional<CheckPolicy> on_check_failure;
  int64_t log_every = 100;           // steps between progress lines; 0: epoch lines only
  // Empty: no scalar log. Else the run's scalars go here every log_every steps, as JSON lines
  // and a TensorBoard event file (parallel/train/train_scalars.h).
  std::string log_dir;
  int64_t max_steps = -1;            // stop after this many steps in all (-1: no limit)
  int64_t eval_batch_size = 1000;
  int divergence_check_every = 0;    // compare replicas' parameters every K steps (0: off)
  // Every K steps each replica recomputes its neighbour's gradient share and compares
  // (TrainStepFn::sentinel_every; 0: off).
  int64_t sentinel_every = 0;
  // ZeRO stage (parallel/train/zero.h): 0 replicated optimizer state, 1 sharded over the
  // replicas, 2 also the gradients reduce-scattered. ZeRO has no checkpoints (checkpoint_dir and resume are refused) and no
  // divergence check (replicas' states differ by design).
  int zero_stage = 0;
  std::vector<int64_t> layers = {784, 512, 256, 10};  // the MLP's
  // The model, picked by name from the program's ModelMenu (parallel/train/model.h); layers
  // and dropout are what the examples' models read of the options (examples/lib/models.h).
  std::string model = "mlp";
  double dropout = 0.0;
  // Empty: every process reads its replicas' rows of each global batch of the whole training
  // set. Else one count per process (MPI rank): process p trains on its own examples only,
  // the next examples_per_process[p] of the training set, in local batches of its replicas'
  // share of batch_size, as when each rank reads its own files. Counts may differ by any
  // amount: a process whose examples run out joins the epoch's remaining steps with zero rows
  // (parallel/join.h), and each step's loss is the mean over the rows fed.
  std::vector<int64_t> examples_per_process;
  // Loss scaling (parallel/train/loss_scaling.h, core/lib/loss_scale.h): the dtype the
  // gradients are all-reduced in ("f32" or "f16"), and the loss scale: empty (none; "dynamic"
  // when grad_dtype is f16), "dynamic", or a static positive number. With a loss scale the run
  // needs checks on and the skip_step policy (the default it then gets).
  std::string grad_dtype = "f32";
  std::string loss_scale;
  // The layers' compute dtype (core/nn/precision.h): "f32" or "bf16".
  std::string compute_dtype = "f32";
  int64_t loss_scale_growth_interval = 2000;  // good steps before a dynamic scale doubles
  // Not an option: the program's arguments (argv[1..]), which train_main sets so that
  // checkpoints record them (for fjit_verify).
  std::vector<std::string> command_line;
};

struct ParsedOptions {
  TrainOptions options;
  bool help = false;
  std::string error;  // non-empty: the command line was wrong
};

// Parses argv[1..argc). Unknown options, missing or malformed values are errors, and so is a
// --model not in `models` (when `models` is not empty: the program's ModelMenu names).
ParsedOptions parse_train_options(int argc, char** argv, TrainOptions defaults = {},
                                  const std::vector<std::string>& models = {});

// The --help text, with the defaults shown.
std::string train_usage(const char* program, const TrainOptions& defaults = {},
                        const std::vector<std::string>& models = {});

// A one-line summary of the options that shape the run (for the log).
std::string describe(const TrainOptions& o);

// The learning-rate schedule of a run of `total_steps` steps.
Schedule learning_rate_schedule(const TrainOptions& o, int64_t total_steps);

// What a checkpoint records of the options and a resumed run must match (unless
// allow_config_change): the model, the optimizer and the schedule.
io::RunConfig run_config(const TrainOptions& o);

// Whether the run scales its loss (a loss scale given, or f16 gradients).
bool loss_scaling_on(const TrainOptions& o);

// "784,512,10".
std::string join(const std::vector<int64_t>& v);
// "mlp, cnn or vit".
std::string join_choices(const std::vector<std::string>& names);

}  // namespace fjit::training
