// A CNN on Fashion-MNIST, data-parallel, checks on: three conv3x3 + ReLU + max-pool blocks
// (32, 64 and 128 channels), dropout, a 128-unit dense layer, dropout, 10 logits
// (examples/lib/models.h). Images go into the step as the file's u8 bytes.
//
//   build/examples/train_cnn --replicas 2          # two thread replicas
//   mpirun -np 2 build/examples/train_cnn          # one replica per MPI rank
//   build/examples/train_cnn --help                # every option of train_fashion_mnist
//
// Exit codes as train_fashion_mnist's.
#include "lib/models.h"

int main(int argc, char** argv) {
  fjit::training::TrainOptions defaults;
  defaults.model = "cnn";
  defaults.dropout = 0.3;
  defaults.epochs = 8;
  defaults.lr = 2e-3;
  defaults.warmup_steps = 200;
  return fjit::training::train_main(argc, argv, "train_cnn", defaults,
                                    fjit::examples::model_menu());
}
