// Dropout with an explicit key (core/trace/random.h: keys are values, never hidden state).
#pragma once

#include "core/trace/random.h"

namespace fjit {

// Inverted dropout: each element kept with probability 1 - rate and scaled by 1 / (1 - rate),
// else zero. rate == 0 returns x; rate must be in [0, 1). The same key drops the same
// elements; derive one key per use (fold_in(key, site)).
Tensor dropout(const Tensor& x, double rate, const Tensor& key, Loc loc = Loc::current());

}  // namespace fjit
