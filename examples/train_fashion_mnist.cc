// The main job: train an MLP classifier (784-512-256-10, ReLU, AdamW, softmax cross entropy)
// on Fashion-MNIST, data-parallel.
//
//   build/examples/train_fashion_mnist --replicas 2          # two thread replicas
//   mpirun -np 2 build/examples/train_fashion_mnist          # one replica per MPI rank
//   build/examples/train_fashion_mnist --help
//
// Every step is one pmap'd function (parallel/train/train_step.h): value_and_grad, a fused
// all-reduce of the gradients, checks that the loss and the gradient norm are sane, and the
// AdamW update; params and optimizer state are double-buffered so steps allocate nothing for
// them. Checkpoints (--checkpoint-dir, --checkpoint-every, --resume) continue a run
// bit-for-bit. Data: Debian's dataset-fashion-mnist package, or --data-dir. The CNN and the
// vision transformer on the same data: train_cnn.cc, train_vit.cc.
//
// Exit codes: 0 done; 1 bad data, a failed check (throw policy) or another error; 2 bad
// command line.
#include "lib/models.h"

int main(int argc, char** argv) {
  return fjit::training::train_main(argc, argv, "train_fashion_mnist", {},
                                    fjit::examples::model_menu());
}
