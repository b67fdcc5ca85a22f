// Command-line options of the language-model program (examples/train_lm.cc), parsed strictly
// with CLI11 (parallel/train/cli_options.h): training a decoder on a text corpus, or, with
// --generate, sampling text from a checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/lib/param_groups.h"
#include "core/ir/check_site.h"
#include "core/lib/schedules.h"
#include "core/nn/decoder.h"

namespace fjit::lm {

struct LmOptions {
  DecoderConfig model;               // vocab is the tokenizer's (256 bytes)
  int64_t steps = 600;               // training steps in all (the schedule spans them)
  int64_t max_steps = -1;            // stop after this many steps (-1: at `steps`); resumable
  int64_t batch_size = 8;            // global: sequences per step, split over the replicas
  double lr = 1e-3;                  // peak learning rate
  double min_lr_ratio = 0.1;         // the cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = 50;         // linear warm-up before the cosine
  double weight_decay = 0.1;
  double b2 = 0.95;                  // AdamW's second-moment decay
  // Parameter groups (core/lib/param_groups.h): `groups` (--group) first, then one group
  // "no_decay" of the no_decay patterns (--no-decay) with weight decay 0. train_lm decays
  // every parameter unless told (its numbers as before); a fine-tuning run need not.
  std::vector<ParamGroup> groups;
  std::vector<std::string> no_decay;
  // Patterns of the parameters trained; the others are frozen (read, never updated, no
  // optimizer state, no gradient all-reduced). Empty: every parameter is trained.
  std::vector<std::string> trainable;
  double clip_grad_norm = 1.0;       // 0: no clipping
  double max_grad_norm = 1e4;        // a pre-clipping norm at or above this fails a check
  uint64_t seed = 0;                 // parameters and data order
  std::string corpus = "/usr/share/games/fortunes";  // a text file or a folder of them
  std::string token_file;            // empty: <checkpoint_dir>/corpus.tokens, else in /tmp
  double validation_fraction = 0.1;  // the corpus's tail kept for validation
  int64_t eval_every = 200;          // steps between validation losses (0: at the end only)
  int64_t eval_batches = 16;         // global batches of validation windows per evaluation
  std::string checkpoint_dir;        // empty: no checkpoints
  int64_t checkpoint_every = 0;      // steps between checkpoints; 0: at the end only
  bool resume = false;
  bool allow_config_change = false;
  std::optional<CheckMode> checks;
  std::optional<CheckPolicy> on_check_failure;
  // Loss scaling (parallel/train/loss_scaling.h): gradients all-reduced in "f32" or "f16", and
  // the loss scale: empty (none; dynamic with f16), "dynamic" or a static positive number.
  // With a loss scale the run needs checks on and the skip_step policy (its default then).
  std::string grad_dtype = "f32";
  std::string loss_scale;
  std::string compute_dtype = "f32";  // the layers' policy (core/nn/precision.h): f32 or bf16
  int64_t loss_scale_growth_interval = 2000;
  int64_t log_every = 20;
  int replicas = 1;                  // informational: Mesh::from_environment reads --replicas
  // ZeRO stage (parallel/train/zero.h): 0 the optimizer state replicated, 1 sharded over the
  // replicas, 2 the gradients reduce-scattered too, 3 the trained parameters sharded too. Not in the run config: a checkpoint holds the whole state at any stage.
  int zero_stage = 0;
  // Where the parameters start when not from the seed (a fine-tuning run's --init-from), and
  // its adapters ("LoRA r 8 alpha 16 on attn/qkv,attn/out"): both go into the checkpoints' run
  // config (empty: not recorded), so a resume from another base or adapter is refused.
  std::string init_from;
  std::string adapters;
  std::string export_hf;             // at the end, the model in Hugging Face's layout here
  // Generation (--generate PROMPT): from the latest checkpoint of checkpoint_dir.
  std::optional<std::string> prompt;
  int64_t new_tokens = 200;
  double temperature = 0.8;          // 0: greedy
  int64_t top_k = 40;                // 0: the whole vocabulary
  // Not an option: the program's arguments (argv[1..]), which lm_main sets so that checkpoints
  // record them (fjit_verify rebuilds the run from them, parallel/lm/lm_verify.h).
  std::vector<std::string> command_line;
};

struct ParsedLmOptions {
  LmOptions options;
  bool help = false;
  std::string error;  // non-empty: the command line was wrong
};

ParsedLmOptions parse_lm_options(int argc, char** argv, LmOptions defaults = {});
std::string lm_usage(const char* program, const LmOptions& defaults = {});
// Whether the run scales its loss (a loss scale given, or f16 gradients).
bool loss_scaling_on(const LmOptions& o);
// One line of what shapes the run.
std::string describe(const LmOptions& o);
// The step's parameter groups: options.groups, then "no_decay" when no_decay is not empty.
std::vector<ParamGroup> lm_param_groups(const LmOptions& o);
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_patterns(const std::string& list);
// --group's value NAME:PATTERNS:LR_SCALE[:WD] (PATTERNS a comma list; WD empty or absent: the
// optimizer's). Throws std::invalid_argument saying what is wrong.
ParamGroup parse_param_group(const std::string& spec);
// Warm-up, then a cosine from lr to lr * min_lr_ratio at `steps`.
Schedule lm_schedule(const LmOptions& o);
// What a checkpoint records and a resumed run must match: the model, optimizer and schedule.
io::RunConfig run_config(const LmOptions& o);

}  // namespace fjit::lm
