// What the ZeRO tests share (tests/zero_test.cc with thread replicas, tests/mpi/zero_mpi_test.cc
// with MPI ranks): a small MLP classifier whose parameters have sizes that 2 and 3 do not
// divide (7x37, 37, 37x3, 3), its batches, and a run of the data-parallel training step
// (parallel/train/train_step.h) replicated or with ZeRO stage 1, 2 or 3, recording every step's
// parameters and loss bits. Test-only, header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/lib/initializers.h"
#include "parallel/fjit.h"
#include "parallel/pmap.h"
#include "parallel/train/train_step.h"
#include "parallel/train/zero.h"

namespace fjit::testing {

inline training::Model zero_test_mlp() {
  training::Model m;
  m.name = "zero_mlp";
  m.inputs = 7;
  m.init = [](uint64_t seed) { return mlp_params({7, 37, 3}, seed, Init::he_normal); };
  m.logits = [](const Params& p, const Tensor& x, bool, const Tensor&) {
    return matmul(relu(matmul(x, p["w1"]) + p["b1"]), p["w2"]) + p["b2"];
  };
  return m;
}

// Step t's global batch of `rows` examples (images [rows, 7], labels in [0, 3)).
inline std::pair<Array, Array> zero_test_batch(int64_t t, int64_t rows) {
  Array x(DType::f32, {rows, 7}), y(DType::i32, {rows});
  SplitMix64 rng(1000 + static_cast<uint64_t>(t));
  for (int64_t i = 0; i < rows * 7; ++i) x.data<float>()[i] = static_cast<float>(rng.normal());
  for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i + t) % 3);
  return {x, y};
}

inline uint32_t bits_of(const Array& scalar_f32) {
  uint32_t b;
  std::memcpy(&b, scalar_f32.raw(), sizeof b);
  return b;
}

struct ZeroTestRun {
  std::vector<ArrayDict> params;  // after each step
  std::vector<uint32_t> losses, norms;
  ArrayDict state;                // after the last step (this process's replicas' shards with ZeRO)
  int64_t replica_state_bytes = 0;  // the state one replica's step returned (replica 0's)
  int64_t replica_param_bytes = 0;  // the parameters one replica's step returned (replica 0's)
};

// `steps` steps on `mesh` from the same initial parameters; each process feeds its replicas'
// rows of every global batch.
inline ZeroTestRun zero_test_run(const Mesh& mesh, int zero_stage, int steps, int64_t rows) {
  training::TrainStepFn fn;
  fn.schedule = Schedule::constant(1e-2);
  fn.model = zero_test_mlp();
  fn.zero_stage = zero_stage;
  ArrayDict params = fn.model.init(3);
  const std::vector<training::ZeroParamShape> shapes = training::zero_param_shapes(params);
  if (zero_stage == 3) fn.zero3_shapes = shapes;
  training::TrainStep train = training::make_train_step(mesh, fn, PmapOptions{});
  ArrayDict state = zero_stage ? training::zero_init_state(params, mesh) : AdamW{}.init_state(params);
  if (zero_stage == 3) params = training::zero_shard_params(params, mesh);
  const Array scale = Array::scalar<float>(1.0f);
  ZeroTestRun run;
  for (int t = 0; t < steps; ++t) {
    auto [x, y] = zero_test_batch(t, rows);
    if (mesh.processes() > 1) {  // this process's replicas' rows
      const int64_t b = Mesh::shard_range(rows, mesh.size(), mesh.first_replica()).first;
      const int64_t e = Mesh::shard_range(rows, mesh.size(), mesh.first_replica() + mesh.local_size() - 1).second;
      x = x.rows(b, e);
      y = y.rows(b, e);
    }
    auto [p2, s2, loss, accuracy, norm] = train(params, state, x, y, Array::scalar<int32_t>(t), scale);
    run.replica_state_bytes = run.replica_param_bytes = 0;
    for (const auto& kv : s2) run.replica_state_bytes += static_cast<int64_t>(kv.second.nbytes());
    for (const auto& kv : p2) run.replica_param_bytes += static_cast<int64_t>(kv.second.nbytes());
    if (zero_stage) {
      std::vector<const std::vector<Array>*> others;
      for (int r = 1; r < mesh.local_size(); ++r) others.push_back(&train.replica_outputs(r));
      s2 = training::zero_local_state(s2, others, p2.size());
      if (zero_stage == 3) p2 = training::zero_local_state(p2, others, 0);
    }
    params = std::move(p2);
    state = std::move(s2);
    run.params.push_back(zero_stage == 3 ? training::zero_gather_params(params, shapes, mesh) : params);
    run.losses.push_back(bits_of(loss));
    run.norms.push_back(bits_of(norm));
  }
  run.state = std::move(state);
  return run;
}

// Every step's parameters bit-identical, and the same loss bits; the same gradient norm bits
// when `norm_bits` (stage 2 sums the norm's squares in another order: within 1e-5 then).
inline void expect_same_bits(const ZeroTestRun& ref, const ZeroTestRun& zero, const char* what, bool norm_bits = true) {
  ASSERT_EQ(ref.params.size(), zero.params.size());
  for (size_t t = 0; t < ref.params.size(); ++t) {
    for (const auto& [name, p] : ref.params[t])
      ASSERT_TRUE(p.bit_equal(zero.params[t].at(name))) << what << ": parameter " << name << " after step " << t + 1;
    EXPECT_EQ(ref.losses[t], zero.losses[t]) << what << ": loss of step " << t + 1;
    if (norm_bits) {
      EXPECT_EQ(ref.norms[t], zero.norms[t]) << what << ": gradient norm of step " << t + 1;
    } else {
      float a, b;
      std::memcpy(&a, &ref.norms[t], sizeof a);
      std::memcpy(&b, &zero.norms[t], sizeof b);
      EXPECT_NEAR(a, b, 1e-5 * a) << what << ": gradient norm of step " << t + 1;
    }
  }
}

// The sharded state of replicas first .. first + local - 1 of n (rows of this process) equals
// the replicated state's elements [i k, (i + 1) k), zeros past the parameter's end.
inline void expect_state_is_slices(const ArrayDict& whole, const ArrayDict& sharded, int n, int first, int local) {
  for (const auto& [name, w] : whole) {
    const Array& s = sharded.at(name);
    if (w.rank() == 0) {
      EXPECT_TRUE(w.bit_equal(s)) << name;
      continue;
    }
    const int64_t k = training::zero_shard_size(w.size(), n);
    ASSERT_EQ(s.shape(), (Shape{k * local})) << name;
    for (int64_t j = 0; j < k * local; ++j) {
      const int64_t i = first * k + j;
      const float want = i < w.size() ? w.data<float>()[i] : 0.0f;
      ASSERT_EQ(std::memcmp(&want, s.data<float>() + j, sizeof want), 0) << name << " element " << i;
    }
  }
}

}  // namespace fjit::testing
