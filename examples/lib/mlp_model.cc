#include "lib/mlp_model.h"

namespace fjit::examples {

ArrayDict init_mlp(const std::vector<int64_t>& sizes, uint64_t seed) {
  return mlp_params(sizes, seed, Init::he_normal);
}

Tensor mlp_logits(const Params& p, const Tensor& x) { return mlp(p, x); }

}  // namespace fjit::examples
