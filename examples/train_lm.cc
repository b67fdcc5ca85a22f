// The language-model main job: a GPT-style decoder (6 layers, d 384, 6 heads, context 256,
// bytes as tokens) trained data-parallel on the text of Debian's `fortunes` package, with
// checks on, or, with --generate, sampling from its checkpoint.
//
//   build/examples/train_lm --replicas 2 --checkpoint-dir runs/lm        # threads
//   mpirun -np 2 build/examples/train_lm --checkpoint-dir runs/lm        # MPI ranks
//   build/examples/train_lm --checkpoint-dir runs/lm --generate "Q: Why"  # sample
#include "parallel/lm/lm_main.h"

int main(int argc, char** argv) { return fjit::lm::lm_main(argc, argv); }
