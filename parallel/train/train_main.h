// The main program of a training program: parses the command line over `defaults` (--model
// among `models`' names), builds the mesh (--replicas N threads, or the ranks of mpirun),
// loads Fashion-MNIST (IDX files), trains the chosen model with Trainer (trainer.h), prints
// progress, the metrics report, the wall time and the test accuracy.
//
// Exit codes: 0 done; 1 bad data, a failed check (throw policy) or another error; 2 bad
// command line.
#pragma once

#include "parallel/train/model.h"
#include "parallel/train/train_options.h"

namespace fjit::training {

int train_main(int argc, char** argv, const char* program, const TrainOptions& defaults,
               const ModelMenu& models);

}  // namespace fjit::training
