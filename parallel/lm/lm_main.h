// The language-model program's main (examples/train_lm.cc): parse the options, make the mesh
// (mpirun ranks or --replicas threads), then train (LmTrainer::run) or, with --generate,
// sample from the latest checkpoint. Returns the exit code: 0, 1 (a failed check or an
// error, said on stderr), 2 (a bad command line).
#pragma once

namespace fjit::lm {

int lm_main(int argc, char** argv);

}  // namespace fjit::lm
