#include "parallel/lm/finetune_options.h"

#include <memory>

#include <fmt/ranges.h>

#include "parallel/lm/lm_cli.h"
#include "parallel/train/cli_options.h"

namespace fjit::lm {
namespace {

std::unique_ptr<CLI::App> make_app(const std::string& program, FinetuneOptions& o) {
  auto app = std::make_unique<CLI::App>(
      "Fine-tunes a Hugging Face GPT-2 or Llama checkpoint on a text corpus (bytes as tokens), with "
      "LoRA adapters or fully, data-parallel over the replicas.\n  mpirun -np N " + program +
          " --init-from HF_DIR [options]   (one replica per rank)",
      program);
  app->footer("Environment: FJIT_LOG_LEVEL, FJIT_CHECKS, FJIT_ON_CHECK_FAILURE, FJIT_DUMP_DIR, ...");
  app->allow_windows_style_options(false);
  training::cli::OptionAdder add(*app);
  add.text("--init-from", "HF_DIR", o.lm.init_from,
           "the model to fine-tune: a Hugging Face directory (config.json, *.safetensors); required");
  add.integer("--lora-rank", o.lora_rank, 0, "LoRA adapters' rank r (0: no adapters, full fine-tuning)");
  add.real("--lora-alpha", o.lora_alpha, "LoRA's alpha: the adapters' scale is alpha / r");
  add.value("--lora-targets", "PATTERNS",
            fmt::format("linear layers that get an adapter, a comma list of name patterns ({}: every "
                        "linear layer of the blocks, as QLoRA does; PEFT's own defaults adapt the "
                        "attention input alone: attn/qkv, GPT-2's c_attn or Llama's q,k,v_proj)",
                        fmt::join(o.lora_targets, ",")),
            [&o](const std::string& v) { o.lora_targets = split_patterns(v); return !o.lora_targets.empty(); },
            "a comma list of patterns");
  add.value("--train", "PATTERNS",
            "more parameters to train besides the adapters, a comma list of name patterns (with "
            "--lora-rank 0: the only ones trained; none given: all)",
            [&o](const std::string& v) { o.train = split_patterns(v); return !o.train.empty(); },
            "a comma list of patterns");
  add.text("--export-peft", "DIR", o.export_peft,
           "at the end, write the adapters alone in PEFT's layout (adapter_config.json, "
           "adapter_model.safetensors) to DIR (none)");
  add_training_options(*app, o.lm);
  return app;
}

}  // namespace

FinetuneOptions finetune_defaults() {
  FinetuneOptions o;
  o.lm.no_decay = {"*/b", "*/g"};
  o.lm.corpus = "/usr/share/common-licenses";
  o.lm.steps = 200;
  o.lm.warmup_steps = 20;
  o.lm.eval_every = 50;
  return o;
}

ParsedFinetuneOptions parse_finetune_options(int argc, char** argv, FinetuneOptions defaults) {
  ParsedFinetuneOptions r;
  r.options = std::move(defaults);
  std::unique_ptr<CLI::App> app = make_app(argc > 0 ? argv[0] : "finetune_lm", r.options);
  r.error = training::cli::parse(*app, argc, argv, &r.help);
  const FinetuneOptions& o = r.options;
  if (!r.error.empty() || r.help) return r;
  if (o.lm.init_from.empty()) r.error = "--init-from HF_DIR is required";
  else if (o.lm.resume && o.lm.checkpoint_dir.empty()) r.error = "--resume needs --checkpoint-dir";
  else if (o.lm.validation_fraction <= 0 || o.lm.validation_fraction >= 1)
    r.error = "--validation-fraction must be in (0, 1)";
  else if (!o.export_peft.empty() && o.lora_rank == 0) r.error = "--export-peft needs adapters (--lora-rank > 0)";
  else if (o.lora_rank > 0 && o.lora_alpha <= 0) r.error = "--lora-alpha must be > 0";
  return r;
}

std::string finetune_usage(const char* program, FinetuneOptions defaults) {
  return make_app(program, defaults)->help();
}

std::vector<std::string> finetune_trainable(const FinetuneOptions& o) {
  std::vector<std::string> patterns;
  if (o.lora_rank > 0) patterns = {"*/lora_a", "*/lora_b"};
  patterns.insert(patterns.end(), o.train.begin(), o.train.end());
  return patterns;
}

std::string describe_adapters(const FinetuneOptions& o) {
  if (o.lora_rank == 0) return "";
  return fmt::format("LoRA r {} alpha {} on {}", o.lora_rank, o.lora_alpha, fmt::join(o.lora_targets, ","));
}

}  // namespace fjit::lm
