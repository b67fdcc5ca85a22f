// The main program of the training examples: parses the command line over `defaults`, builds
// the mesh (--replicas N threads, or the ranks of mpirun), loads Fashion-MNIST, trains with
// Trainer (lib/train_loop.h), prints progress, the metrics report, the wall time and the test
// accuracy.
//
// Exit codes: 0 done; 1 bad data, a failed check (throw policy) or another error; 2 bad
// command line.
#pragma once

#include "lib/train_options.h"

namespace fjit::examples {

int train_main(int argc, char** argv, const char* program, const TrainOptions& defaults);

}  // namespace fjit::examples
