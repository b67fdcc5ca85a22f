// Command-line options of the fine-tuning program (examples/finetune_lm.cc): a Hugging Face
// checkpoint (--init-from) fine-tuned on a text corpus, with LoRA adapters (--lora-rank R) or
// fully (--lora-rank 0), then exported merged (--export-hf) or as a PEFT adapter
// (--export-peft). The training options are train_lm's (parallel/lm/lm_options.h); the model's
// shape is the checkpoint's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/lm/lm_options.h"

namespace fjit::lm {

struct FinetuneOptions {
  LmOptions lm;              // lm.init_from: the HF directory; lm.export_hf: the merged export
  int64_t lora_rank = 8;     // 0: no adapters (full fine-tuning, or --train's parameters)
  double lora_alpha = 16;    // the adapters' scale is alpha / rank
  // Linear layers that get an adapter (core/nn/lora.h LoraOptions::targets): every linear
  // layer of the blocks, as QLoRA does (PEFT's own default adapts the attention input alone).
  std::vector<std::string> lora_targets = {"attn/qkv", "attn/out", "mlp/*"};
  std::vector<std::string> train;  // patterns of more parameters to train (e.g. "norm*")
  std::string export_peft;         // at the end, the adapters alone in PEFT's layout here
};

// The fine-tuning defaults: train_lm's, with no weight decay on biases and norm gains
// ("*/b,*/g"), the Debian licence texts (/usr/share/common-licenses, package base-files) as
// the corpus, and a shorter schedule.
FinetuneOptions finetune_defaults();

struct ParsedFinetuneOptions {
  FinetuneOptions options;
  bool help = false;
  std::string error;  // non-empty: the command line was wrong
};

ParsedFinetuneOptions parse_finetune_options(int argc, char** argv,
                                             FinetuneOptions defaults = finetune_defaults());
std::string finetune_usage(const char* program, FinetuneOptions defaults = finetune_defaults());

// The patterns of the trained parameters: with adapters, their matrices ("*/lora_a",
// "*/lora_b"; the scales stay frozen) and `train`; without, `train`, or every parameter when
// `train` is empty (returned as {}).
std::vector<std::string> finetune_trainable(const FinetuneOptions& o);
// "LoRA r 8 alpha 16 on attn/qkv,attn/out,mlp/*", or "" without adapters.
std::string describe_adapters(const FinetuneOptions& o);

}  // namespace fjit::lm
