#include "parallel/lm/lm_options.h"

#include <cmath>
#include <memory>
#include <stdexcept>

#include <fmt/ranges.h>

#include "parallel/lm/lm_cli.h"
#include "parallel/train/cli_options.h"

namespace fjit::lm {
namespace {

using training::cli::parse_number;

void add_options(CLI::App& app, LmOptions& o) {
  training::cli::OptionAdder add(app);
  DecoderConfig& m = o.model;
  add.integer("--layers", m.layers, 1, "transformer blocks");
  add.integer("--dim", m.dim, 1, "model width d");
  add.integer("--heads", m.heads, 1, "attention heads (divide d)");
  add.integer("--context", m.context, 2, "tokens per sequence");
  add.value("--positions", "learned|rotary", "position encoding (learned)",
            [&m](const std::string& v) { m.rotary = v == "rotary"; return v == "learned" || v == "rotary"; },
            "learned or rotary");
  add.value("--arch", "gpt2|llama",
            "the block's kind (gpt2): llama means rotary positions, RMS norm, SwiGLU, no attention "
            "biases and an untied head (what --export-hf writes as a Llama)",
            [&m](const std::string& v) {
              const bool llama = v == "llama";
              m.rotary = llama;
              m.norm = llama ? TransformerBlockOptions::Norm::kRmsNorm : TransformerBlockOptions::Norm::kLayerNorm;
              m.mlp = llama ? TransformerBlockOptions::Mlp::kSwiglu : TransformerBlockOptions::Mlp::kGelu;
              m.attention_bias = !llama;
              m.tied_embeddings = !llama;
              return llama || v == "gpt2";
            },
            "gpt2 or llama");
  add.integer("--kv-heads", m.kv_heads, 0, "key/value heads of grouped-query attention (0: --heads)");
  add_training_options(app, o);
  add.value("--generate", "PROMPT", "sample text after PROMPT from the latest checkpoint of "
            "--checkpoint-dir instead of training",
            [&o](const std::string& v) { o.prompt = v; return true; }, "");
  add.integer("--tokens", o.new_tokens, 1, "tokens to generate");
  add.real("--temperature", o.temperature, "sampling temperature (0: greedy)");
  add.integer("--top-k", o.top_k, 0, "sample among the k likeliest tokens (0: all)");
}

std::unique_ptr<CLI::App> make_app(const std::string& program, LmOptions& o) {
  auto app = std::make_unique<CLI::App>(
      "Trains a GPT-style decoder on a text corpus (bytes as tokens), data-parallel over the "
      "replicas, or samples from it.\n  mpirun -np N " + program + " [options]   (one replica per rank)",
      program);
  app->footer("Environment: FJIT_LOG_LEVEL, FJIT_CHECKS, FJIT_ON_CHECK_FAILURE, FJIT_DUMP_DIR, ...");
  app->allow_windows_style_options(false);
  add_options(*app, o);
  return app;
}

}  // namespace

void add_training_options(CLI::App& app, LmOptions& o) {
  training::cli::OptionAdder add(app);
  app.add_flag("--remat", o.model.remat, "recompute each block's activations in the backward pass");
  add.integer("--steps", o.steps, 1, "training steps (the schedule spans them)");
  add.integer("--max-steps", o.max_steps, 0, "stop after N steps in all (resume to go on)");
  add.integer("--batch-size", o.batch_size, 1, "global batch in sequences, split over the replicas");
  add.real("--lr", o.lr, "AdamW peak learning rate");
  add.real("--min-lr-ratio", o.min_lr_ratio, "the cosine ends at lr times this");
  add.integer("--warmup-steps", o.warmup_steps, 0, "linear learning-rate warm-up");
  add.real("--weight-decay", o.weight_decay, "AdamW decoupled weight decay");
  add.value("--no-decay", "PATTERNS",
            fmt::format("parameters without weight decay, a comma list of name patterns ({})",
                        o.no_decay.empty() ? std::string("none") : fmt::format("{}", fmt::join(o.no_decay, ","))),
            [&o](const std::string& v) { o.no_decay = v == "none" ? std::vector<std::string>{} : split_patterns(v); return true; },
            "a comma list of patterns, or none");
  app.add_option_function<std::vector<std::string>>(
         "--group",
         [&o](const std::vector<std::string>& specs) {
           for (const std::string& spec : specs) {
             try {
               o.groups.push_back(parse_param_group(spec));
             } catch (const std::invalid_argument& e) {
               throw training::cli::BadValue("option --group: " + std::string(e.what()));
             }
           }
         },
         "a parameter group NAME:PATTERNS:LR_SCALE[:WD] (repeatable; the first match wins)")
      ->type_name("SPEC")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add.real("--clip-grad-norm", o.clip_grad_norm, "clip the gradient's global norm to this (0: off)");
  add.real("--max-grad-norm", o.max_grad_norm, "a gradient norm at or above this fails a check");
  add.value("--seed", "N", fmt::format("seed of the parameters and the data order ({})", o.seed),
            [&o](const std::string& v) { return parse_number(v, o.seed); }, "an unsigned integer");
  add.integer("--replicas", o.replicas, 1, "thread replicas without mpirun (FJIT_REPLICAS)");
  add.text("--corpus", "PATH", o.corpus, "a text file, or a folder of text files (" + o.corpus + ")");
  add.text("--token-file", "PATH", o.token_file,
           "where the tokenized corpus is written once (<checkpoint-dir>/corpus.tokens)");
  add.real("--validation-fraction", o.validation_fraction, "the corpus's tail kept for validation");
  add.integer("--eval-every", o.eval_every, 0, "steps between validation losses (0: at the end)");
  add.integer("--eval-batches", o.eval_batches, 1, "global batches per validation");
  add.text("--checkpoint-dir", "DIR", o.checkpoint_dir, "write checkpoints here (none)");
  add.integer("--checkpoint-every", o.checkpoint_every, 0, "steps between checkpoints; 0 = at the end");
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --checkpoint-dir");
  app.add_flag("--allow-config-change", o.allow_config_change,
               "resume even if the model, optimizer or schedule differ from the checkpoint's");
  add.check_options(o.checks, o.on_check_failure);
  add.loss_scale_options(o.grad_dtype, o.loss_scale, o.loss_scale_growth_interval);
  add.compute_dtype_option(o.compute_dtype);
  add.integer("--log-every", o.log_every, 0, "steps between progress lines");
  add.integer("--zero", o.zero_stage, 0, "ZeRO stage: 1 shards the optimizer state over the replicas, 2 also reduce-scatters "
              "the gradients, 3 also shards the parameters (0 = off)");
  add.text("--export-hf", "DIR", o.export_hf,
           "at the end, write the model in Hugging Face's layout (config.json, model.safetensors) "
           "to DIR (none)");
}

ParsedLmOptions parse_lm_options(int argc, char** argv, LmOptions defaults) {
  ParsedLmOptions r;
  r.options = std::move(defaults);
  std::unique_ptr<CLI::App> app = make_app(argc > 0 ? argv[0] : "train_lm", r.options);
  r.error = training::cli::parse(*app, argc, argv, &r.help);
  const LmOptions& o = r.options;
  if (!r.error.empty() || r.help) return r;
  if (o.resume && o.checkpoint_dir.empty()) r.error = "--resume needs --checkpoint-dir";
  else if (o.prompt && o.checkpoint_dir.empty()) r.error = "--generate needs --checkpoint-dir";
  else if (o.validation_fraction <= 0 || o.validation_fraction >= 1)
    r.error = "--validation-fraction must be in (0, 1)";
  else if (o.model.dim % o.model.heads != 0)
    r.error = fmt::format("--heads {} must divide --dim {}", o.model.heads, o.model.dim);
  else if (o.zero_stage > 3)
    r.error = fmt::format("--zero {}: the language model takes ZeRO stage 0 to 3", o.zero_stage);
  return r;
}

std::string lm_usage(const char* program, const LmOptions& d) {
  LmOptions shown = d;
  return make_app(program, shown)->help();
}

bool loss_scaling_on(const LmOptions& o) { return !o.loss_scale.empty() || o.grad_dtype == "f16"; }

std::string describe(const LmOptions& o) {
  return fmt::format("model: {} | {} steps of {} x {} tokens | AdamW lr {} (warm-up {}, cosine to x{}), "
                     "weight decay {}, clip {} | seed {}",
                     o.model.describe(), o.steps, o.batch_size, o.model.context, o.lr,
                     o.warmup_steps, o.min_lr_ratio, o.weight_decay, o.clip_grad_norm, o.seed) +
         (o.no_decay.empty() && o.groups.empty() ? "" : " | groups " + fjit::describe(lm_param_groups(o))) +
         (o.trainable.empty() ? "" : fmt::format(" | trained: {}", fmt::join(o.trainable, ","))) +
         (loss_scaling_on(o) ? fmt::format(" | gradients {} loss scale {}", o.grad_dtype,
                                           o.loss_scale.empty() ? "dynamic" : o.loss_scale)
                             : "") +
         (o.compute_dtype == "f32" ? "" : " | compute " + o.compute_dtype);
}

std::vector<std::string> split_patterns(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    if (comma > begin) out.push_back(list.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return out;
}

ParamGroup parse_param_group(const std::string& spec) {
  std::vector<std::string> fields;
  size_t begin = 0;
  for (size_t colon; (colon = spec.find(':', begin)) != std::string::npos; begin = colon + 1)
    fields.push_back(spec.substr(begin, colon - begin));
  fields.push_back(spec.substr(begin));
  if (fields.size() < 3 || fields.size() > 4)
    throw std::invalid_argument(fmt::format("'{}' is not NAME:PATTERNS:LR_SCALE[:WD]", spec));
  ParamGroup g{.name = fields[0], .patterns = split_patterns(fields[1])};
  if (g.name.empty() || g.patterns.empty())
    throw std::invalid_argument(fmt::format("'{}' needs a name and at least one pattern", spec));
  if (!parse_number(fields[2], g.lr_scale) || !std::isfinite(g.lr_scale) || g.lr_scale < 0)
    throw std::invalid_argument(fmt::format("'{}': the learning-rate scale '{}' is not a finite number >= 0", spec, fields[2]));
  if (fields.size() == 4 && !fields[3].empty()) {
    double wd = 0;
    if (!parse_number(fields[3], wd) || !std::isfinite(wd) || wd < 0)
      throw std::invalid_argument(fmt::format("'{}': the weight decay '{}' is not a finite number >= 0", spec, fields[3]));
    g.weight_decay = wd;
  }
  return g;
}

std::vector<ParamGroup> lm_param_groups(const LmOptions& o) {
  std::vector<ParamGroup> groups = o.groups;
  if (!o.no_decay.empty()) groups.push_back({.name = "no_decay", .patterns = o.no_decay, .weight_decay = 0.0});
  return groups;
}

Schedule lm_schedule(const LmOptions& o) {
  const int64_t decay = std::max<int64_t>(1, o.steps - o.warmup_steps);
  Schedule cosine = Schedule::cosine(o.lr, decay, o.lr * o.min_lr_ratio);
  return o.warmup_steps > 0 ? Schedule::warmup(o.warmup_steps, cosine) : cosine;
}

io::RunConfig run_config(const LmOptions& o) {
  // Groups and frozen parameters are recorded only when used: a run without them records what
  // it always did, so its checkpoints stay those of earlier versions.
  std::string optimizer = fmt::format("AdamW b2 {} weight decay {} clip {}", o.b2, o.weight_decay,
                                      o.clip_grad_norm);
  const std::vector<ParamGroup> groups = lm_param_groups(o);
  if (!groups.empty()) optimizer += " groups " + fjit::describe(groups);
  io::RunConfig config = {{"model", o.model.describe()},
                          {"optimizer", optimizer},
                          {"schedule", lm_schedule(o).describe()},
                          {"batch", fmt::format("{} x {}", o.batch_size, o.model.context)},
                          {"validation_fraction", fmt::format("{}", o.validation_fraction)}};
  if (!o.trainable.empty()) config.emplace("trainable", fmt::format("{}", fmt::join(o.trainable, ",")));
  if (!o.init_from.empty()) config.emplace("init", o.init_from);
  if (!o.adapters.empty()) config.emplace("adapters", o.adapters);
  if (loss_scaling_on(o)) {
    config.emplace("grad_dtype", o.grad_dtype);
    config.emplace("loss_scale", o.loss_scale.empty() ? "dynamic" : o.loss_scale);
  }
  // The layers' precision policy changes every step's bits: recorded when not f32.
  if (o.compute_dtype != "f32") config.emplace("compute_dtype", o.compute_dtype);
  return config;
}

}  // namespace fjit::lm
