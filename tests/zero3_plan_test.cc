// ZeRO stage 3 gathers the parameters layer by layer (parallel/train/zero.h), read from the
// compiled plan of the language model's step (6 blocks, 2 thread replicas, no overlap): the
// bytes of gathered parameters alive at once (the results of the all-gathers of parameter
// shards and of the instructions that read only them, their unpadding) peak at a fraction of
// the whole model's, within two blocks' parameters, where
// gathering every parameter at the step's start and keeping it for the backward pass holds
// all of them at once; the backward pass gathers again (more all-gathers than parameters); and
// the gathers are prefetched: each all-gather but the first runs on the collective worker and
// starts before the first reader of the previous one, so it is in flight while that layer
// computes. The measure can fail: with overlap the gathers keep their place
// in the chain of collectives, all at the step's start, and are kept for the backward pass: it
// then counts the whole model. The parameters stay bit-identical to the replicated step's
// (tests/zero_lm_test.cc, tests/zero_test.cc and their MPI twins).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "core/compile/executable.h"
#include "core/lib/initializers.h"
#include "core/nn/decoder.h"
#include "parallel/lm/lm_step.h"

namespace fjit {
namespace {

struct Gathered {
  int64_t peak_bytes = 0;  // of gathered parameters alive at one instruction
  int all_gathers = 0;  // of plan inputs (parameter shards)
  std::vector<int> starts;         // per such all-gather, in plan order: its instruction
  std::vector<int> first_readers;  // and the first instruction that reads its result
  std::vector<char> overlapped;    // and whether it runs on the collective worker
};

// From the plan alone: a value is gathered when an all-gather of a plan input made it, or an
// instruction that reads only gathered values and plan inputs; it lives from its instruction to
// its last reader. (The clipping's all-gathers of averaged gradients do not count.)
Gathered gathered_in_plan(const Executable& exe) {
  const int n = static_cast<int>(exe.instrs.size());
  std::vector<char> gathered(exe.buffers.size(), 0);
  std::vector<int> first(exe.buffers.size(), -1), last(exe.buffers.size(), -1);
  std::vector<int64_t> bytes(exe.buffers.size(), 0);
  Gathered g;
  for (int i = 0; i < n; ++i) {
    const Instr& in = exe.instrs[i];
    for (size_t k = 0; k < in.ins.size(); ++k) last[in.in_bufs[k]] = i;
    const bool of_input = in.op == Op::AllGather && exe.buffers[in.in_bufs[0]].kind == BufferRef::kInput;
    bool mine = of_input, reads_gathered = false, reads_other = false;
    for (size_t k = 0; k < in.ins.size(); ++k) {
      const int b = in.in_bufs[k];
      if (gathered[b]) reads_gathered = true;
      else if (exe.buffers[b].kind == BufferRef::kArena) reads_other = true;
    }
    g.all_gathers += of_input;
    if (of_input) {
      g.starts.push_back(i);
      g.overlapped.push_back(exe.overlapped.empty() ? 0 : static_cast<char>(exe.overlapped[i]));
      g.first_readers.push_back(-1);
      for (int j = i + 1; j < n && g.first_readers.back() < 0; ++j)
        for (int b : exe.instrs[j].in_bufs)
          if (b == in.out_buf) g.first_readers.back() = j;
    }
    mine = mine || (reads_gathered && !reads_other && op_kind(in.op) != OpKind::kCollective);
    if (!mine || exe.buffers[in.out_buf].kind != BufferRef::kArena) continue;
    gathered[in.out_buf] = 1;
    first[in.out_buf] = last[in.out_buf] = i;
    bytes[in.out_buf] = num_elements(in.out.shape) * static_cast<int64_t>(dtype_size(in.out.dtype));
  }
  for (int t = 0; t < n; ++t) {
    int64_t live = 0;
    for (size_t b = 0; b < gathered.size(); ++b)
      if (gathered[b] && first[b] <= t && t <= last[b]) live += bytes[b];
    g.peak_bytes = std::max(g.peak_bytes, live);
  }
  return g;
}

// The plan of one stage 3 step of `model` on 2 thread replicas, with `overlap`.
Gathered step_plan(const DecoderConfig& model, const ArrayDict& params, Overlap overlap) {
  const Mesh mesh = Mesh::threads(2);
  PmapOptions options;
  options.jit.overlap = overlap;
  lm::LmStep step = lm::make_lm_step(
      mesh, {.model = model, .zero_stage = 3, .zero3_shapes = training::zero_param_shapes(params)}, options);
  Array x = Array::zeros(DType::i32, {4, 6}), y = Array::zeros(DType::i32, {4, 6});
  (void)step(training::zero_shard_params(params, mesh), training::zero_init_state(params, mesh), x, y,
             Array::scalar<int32_t>(0));
  const Executable& exe = *step.jit_core().last_entry()->exe;
  EXPECT_EQ(exe.overlap, overlap);
  if (std::getenv("ZERO3_DUMP")) std::cerr << exe.plan_string();
  return gathered_in_plan(exe);
}

TEST(Zero3Plan, ParametersAreGatheredLayerByLayerAndAgainForTheBackwardPass) {
  const DecoderConfig model{.vocab = 11, .context = 6, .dim = 16, .layers = 6, .heads = 2};
  ArrayDict params;
  decoder_params(params, model, 4);
  int64_t whole_bytes = 0;
  int64_t block_bytes = 0;  // one block's parameters (every block has the same)
  for (const auto& [name, p] : params) {
    whole_bytes += static_cast<int64_t>(p.nbytes());
    if (name.rfind("block0/", 0) == 0) block_bytes += static_cast<int64_t>(p.nbytes());
  }
  const Gathered g = step_plan(model, params, Overlap::off);
  RecordProperty("gathered_peak_bytes", std::to_string(g.peak_bytes));
  RecordProperty("whole_bytes", std::to_string(whole_bytes));
  RecordProperty("block_bytes", std::to_string(block_bytes));
  EXPECT_GT(g.peak_bytes, 0);
  EXPECT_LT(g.peak_bytes, whole_bytes / 3) << "gathered parameters alive at once, of " << whole_bytes;
  // Within two blocks' parameters (counting a gather and its unpadded copy both).
  EXPECT_LE(g.peak_bytes, 2 * block_bytes) << "gathered parameters alive at once";
  EXPECT_GT(g.all_gathers, static_cast<int>(params.size())) << "the backward pass gathers again";
  // Prefetch: every all-gather after the first is in flight while the previous one's layer
  ASSERT_EQ(g.starts.size(), static_cast<size_t>(g.all_gathers));
  // computes. (A backward replay that no rule reads has no reader; the next gather is compared
  // with the last one read.)
  ASSERT_GE(g.first_readers[0], 0);
  int read = 0;  // the last gather with a reader
  for (size_t k = 1; k < g.starts.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "all-gather " << k << " of " << g.starts.size());
    // All but the first few (the token and position tables that the step's first instruction
    // reads) run on the collective worker.
    if (k >= 2) {
      EXPECT_TRUE(g.overlapped[k]) << "runs on the collective worker";
    }
    EXPECT_LT(g.starts[k], g.first_readers[read]) << "starts before the previous gather's first reader";
    if (g.first_readers[k] >= 0) read = static_cast<int>(k);
  }
  // With overlap every parameter is gathered at the start and kept: the whole model.
  const Gathered at_start = step_plan(model, params, Overlap::schedule);
  RecordProperty("gathered_peak_bytes_overlap", std::to_string(at_start.peak_bytes));
  EXPECT_GE(at_start.peak_bytes, whole_bytes);
  EXPECT_EQ(at_start.all_gathers, static_cast<int>(params.size()));
  EXPECT_EQ(std::count(at_start.overlapped.begin(), at_start.overlapped.end(), 1), 0)
      << "overlap keeps the gathers in its chain of collectives, on the plan's thread";
}

}  // namespace
}  // namespace fjit
