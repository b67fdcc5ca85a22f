// The main program of a training program: parses the command line over `defaults` (--model
// among `models`' names), builds the mesh (--replicas N threads, or the ranks of mpirun),
// loads Fashion-MNIST (IDX files), trains the chosen model with Trainer (trainer.h), prints
// progress, the metrics report, the wall time and the test accuracy.
//
// Exit codes: 0 done; 1 bad data, a failed check (throw policy) or another error; 2 bad
// command line.
#pragma once

#include <functional>

#include "parallel/mesh.h"
#include "parallel/train/model.h"
#include "parallel/train/train_options.h"

namespace fjit::training {

// The part every training program's main shares: makes the mesh from the command line
// (--replicas N threads, or the ranks of mpirun; a bad value: exit 2), then runs `job` on it.
// A CheckError (raised on every replica at the same step, its report already logged) and any
// other exception are said once, on the primary replica, and give exit code 1.
int run_training_job(int argc, char** argv, const std::function<int(Mesh&)>& job);

int train_main(int argc, char** argv, const char* program, const TrainOptions& defaults,
               const ModelMenu& models);

}  // namespace fjit::training
