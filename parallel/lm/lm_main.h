// The language-model program's main (examples/train_lm.cc): parse the options, make the mesh
// (mpirun ranks or --replicas threads), then train (LmTrainer::run) or, with --generate,
// sample from the latest checkpoint. Returns the exit code: 0, 1 (a failed check or an
// error, said on stderr), 2 (a bad command line).
#pragma once

#include "parallel/mesh.h"

namespace fjit::lm {

class LmTrainer;

int lm_main(int argc, char** argv);

// trainer.run(), then, on the primary replica, the metrics report, the run's time and
// throughput, and the final validation loss (bits per byte, or per token for another
// vocabulary). Returns that loss.
double run_and_report(LmTrainer& trainer, const Mesh& mesh);

}  // namespace fjit::lm
