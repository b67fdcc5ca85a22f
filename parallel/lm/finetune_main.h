// The fine-tuning program's main (examples/finetune_lm.cc): parse the options
// (parallel/lm/finetune_options.h), make the mesh (mpirun ranks or --replicas threads), load the
// Hugging Face checkpoint (every process reads it), add the LoRA adapters, train with LmTrainer
// (the adapters, or the --train parameters, trainable; the rest frozen), then, on the primary
// replica while the others wait, export: merged in Hugging Face's layout (--export-hf) and the
// adapters alone in PEFT's (--export-peft). Returns the exit code: 0, 1 (a failed check or an
// error, said on stderr), 2 (a bad command line).
#pragma once

#include <string>
#include <vector>

#include "core/hf/hf_checkpoint.h"
#include "parallel/lm/finetune_options.h"

namespace fjit::lm {

// What a fine-tuning run starts from: the checkpoint, and its parameters with the adapters
// added (drawn from options.lm.seed, so every process adds the same); `options.lm` completed
// with the checkpoint's model (remat kept), the trainable patterns and the adapters'
// description.
struct FinetuneStart {
  hf::HfModel base;
  ArrayDict params;
  std::vector<std::string> adapted;  // the layers given an adapter
  LmOptions options;
};
FinetuneStart finetune_start(const FinetuneOptions& options);

int finetune_main(int argc, char** argv);

}  // namespace fjit::lm
