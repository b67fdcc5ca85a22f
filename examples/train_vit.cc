// A small vision transformer on Fashion-MNIST, data-parallel, checks on: 7x7 patches (16
// tokens) embedded to 64 dimensions with learned positions, 4 pre-norm blocks of 4-head
// self-attention and a GELU MLP, dropout, layer norm, mean over tokens, 10 logits
// (examples/lib/models.h). Images go into the step as the file's u8 bytes.
//
//   build/examples/train_vit --replicas 2          # two thread replicas
//   mpirun -np 2 build/examples/train_vit          # one replica per MPI rank
//   build/examples/train_vit --help                # every option of train_fashion_mnist
//
// Exit codes as train_fashion_mnist's.
#include "lib/models.h"

int main(int argc, char** argv) {
  fjit::training::TrainOptions defaults;
  defaults.model = "vit";
  defaults.dropout = 0.1;
  defaults.epochs = 10;
  defaults.lr = 2e-3;
  defaults.warmup_steps = 400;
  defaults.weight_decay = 0.05;
  return fjit::training::train_main(argc, argv, "train_vit", defaults,
                                    fjit::examples::model_menu());
}
