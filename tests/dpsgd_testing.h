// A few DP-SGD steps (examples/lib/dp_sgd.h) on a mesh, for tests/dpsgd_test.cc and
// tests/mpi/dpsgd_mpi_test.cc: each process feeds its replicas' rows of every global batch
// (io::BatchIterator with the mesh's data shard), as train_dpsgd does.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/dp_sgd.h"
#include "lib/mlp_model.h"

namespace fjit::testing {

struct DpRun {
  std::vector<int64_t> layers = {784, 64, 10};
  int64_t batch = 48;  // global: 48, 24 or 16 rows per replica on 1, 2 or 3 replicas
  int steps = 3;
  double clip = 0.5, noise = 1.0;
};

inline ArrayDict train_dp(const Mesh& mesh, const io::Dataset& data, const DpRun& run) {
  examples::DpSgdStepFn fn;
  fn.clip = run.clip;
  fn.noise = run.noise;
  fn.seed = 3;
  fn.schedule = Schedule::constant(1e-2);
  examples::DpSgdStep step = examples::make_dp_sgd_step(mesh, fn);
  ArrayDict params = mesh.replicate(examples::init_mlp(run.layers, 5));
  ArrayDict state = fn.optimizer.init_state(params);
  io::BatchIterator batches(data, {.batch_size = run.batch, .seed = 1, .shard = mesh.data_shard()});
  for (int s = 0; s < run.steps; ++s) {
    const io::Batch* b = batches.next();
    if (b == nullptr) {
      batches.set_epoch(batches.epoch() + 1);
      b = batches.next();
    }
    auto [p2, s2, loss, clipped] = step(params, state, (*b)["images"], (*b)["labels"], Array::scalar(int32_t{s}));
    params = std::move(p2);
    state = std::move(s2);
  }
  return params;
}

}  // namespace fjit::testing
