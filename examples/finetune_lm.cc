// The fine-tuning main job: a Hugging Face GPT-2 or Llama checkpoint (for instance train_lm's
// own, exported with --export-hf) fine-tuned on the text of a Debian package (the licence texts
// of base-files in /usr/share/common-licenses unless --corpus says otherwise), with LoRA
// adapters or fully, data-parallel with checks on, then exported merged or as a PEFT adapter.
//
//   build/examples/train_lm --replicas 2 --export-hf runs/base                 # pretrain, export
//   build/examples/finetune_lm --init-from runs/base --replicas 2 --export-peft runs/adapter
//                                                                              # LoRA, threads
//   mpirun -np 2 build/examples/finetune_lm --init-from runs/base --lora-rank 0 # full, MPI ranks
#include "parallel/lm/finetune_main.h"

int main(int argc, char** argv) { return fjit::lm::finetune_main(argc, argv); }
