// ZeRO stage 3 gathers the parameters layer by layer (parallel/train/zero.h), read from the
// compiled plan of the language model's step (6 blocks, 2 thread replicas), without overlap and
// with it (schedule, worker): the bytes of gathered parameters alive at once (the results of
// the all-gathers of parameter shards and of the instructions that read only them, their
// unpadding) peak within two blocks' parameters, a fraction of the whole model's, where
// gathering every parameter at the step's start and keeping it for the backward pass holds all
// of them at once; the backward pass gathers again (more all-gathers than parameters); and the
// gathers are prefetched: each all-gather but the first runs on the collective worker and
// starts before the first reader of the previous one, so it is in flight while that layer
// computes. Each measure can fail: a gather run just before its reader, or all of them at the
// step's start. The parameters stay bit-identical to the replicated step's
// (tests/zero_lm_test.cc, tests/zero_test.cc and their MPI twins).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
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
Gathered step_plan(const DecoderConfig& model, const ArrayDict& params, Overlap overlap, bool prefetch = true) {
  const Mesh mesh = Mesh::threads(2);
  PmapOptions options;
  options.jit.overlap = overlap;
  options.jit.gather_prefetch = prefetch;
  lm::LmStep step = lm::make_lm_step(
      mesh, {.model = model, .zero_stage = 3, .zero3_shapes = training::zero_param_shapes(params)}, options);
  Array x = Array::zeros(DType::i32, {4, 6}), y = Array::zeros(DType::i32, {4, 6});
  (void)step(training::zero_shard_params(params, mesh), training::zero_init_state(params, mesh), x, y,
             Array::scalar<int32_t>(0));
  const Executable& exe = *step.jit_core().last_entry()->exe;
  EXPECT_EQ(exe.overlap, overlap);
  return gathered_in_plan(exe);
}

TEST(Zero3Plan, ParametersAreGatheredLayerByLayerPrefetchedAndAgainForTheBackwardPass) {
  const DecoderConfig model{.vocab = 11, .context = 6, .dim = 16, .layers = 6, .heads = 2};
  ArrayDict params;
  decoder_params(params, model, 4);
  int64_t whole_bytes = 0;
  int64_t block_bytes = 0;  // one block's parameters (every block has the same)
  for (const auto& [name, p] : params) {
    whole_bytes += static_cast<int64_t>(p.nbytes());
    if (name.rfind("block0/", 0) == 0) block_bytes += static_cast<int64_t>(p.nbytes());
  }
  RecordProperty("whole_bytes", std::to_string(whole_bytes));
  RecordProperty("block_bytes", std::to_string(block_bytes));
  for (Overlap overlap : {Overlap::off, Overlap::schedule, Overlap::worker}) {
    SCOPED_TRACE(::testing::Message() << "overlap " << overlap_name(overlap));
    const Gathered g = step_plan(model, params, overlap);
    RecordProperty(std::string("gathered_peak_bytes_") + overlap_name(overlap), std::to_string(g.peak_bytes));
    EXPECT_GT(g.peak_bytes, 0);
    EXPECT_LT(g.peak_bytes, whole_bytes / 3) << "gathered parameters alive at once, of " << whole_bytes;
    // Within two blocks' parameters (counting a gather and its unpadded copy both).
    EXPECT_LE(g.peak_bytes, 2 * block_bytes) << "gathered parameters alive at once";
    EXPECT_GT(g.all_gathers, static_cast<int>(params.size())) << "the backward pass gathers again";
    // Prefetch: every all-gather after the first is in flight while the previous one's layer
    // computes. (A backward replay that no rule reads has no reader; the next gather is
    // compared with the last one read.)
    ASSERT_EQ(g.starts.size(), static_cast<size_t>(g.all_gathers));
    ASSERT_GE(g.first_readers[0], 0);
    int read = 0;  // the last gather with a reader
    int behind = 0;  // gathers not started ahead of the previous one's first reader
    int on_plan_thread = 0;  // after the first two (the token and position tables that the
                             // step's first instruction reads), gathers not on the worker
    for (size_t k = 1; k < g.starts.size(); ++k) {
      behind += g.starts[k] >= g.first_readers[read];
      on_plan_thread += k >= 2 && !g.overlapped[k];
      if (g.first_readers[k] >= 0) read = static_cast<int>(k);
    }
    EXPECT_EQ(behind, 0) << "gathers that start after the previous gather's first reader";
    EXPECT_EQ(on_plan_thread, 0) << "gathers that do not run on the collective worker";
  }
  // JitOptions::gather_prefetch off: each gather runs just before its reader (most start
  // after the previous one's reader: all but those read by the same instruction), on the
  // plan's thread.
  const Gathered g = step_plan(model, params, Overlap::off, false);
  EXPECT_LE(g.peak_bytes, 2 * block_bytes);
  EXPECT_EQ(std::count(g.overlapped.begin(), g.overlapped.end(), 1), 0);
  int behind = 0, read = 0;
  for (size_t k = 1; k < g.starts.size(); ++k) {
    behind += g.starts[k] > g.first_readers[read];
    if (g.first_readers[k] >= 0) read = static_cast<int>(k);
  }
  EXPECT_GT(behind, g.all_gathers / 2);
}

}  // namespace
}  // namespace fjit
