// Batches of next-token windows read straight from a mapped token file (token_file.h).
//
//   io::TokenFile tokens = io::TokenFile::open("corpus.tok");
//   auto [b, e] = io::Shard{first, count, of}.rows(opts.global_batch);   // data.h
//   io::TokenBatches train(tokens, io::Split::kTrain, opts, b, e);
//   Array x, y;
//   train.seek(step_from_checkpoint);
//   for (...) { train.next(x, y); step(params, x, y); }   // x, y: i32 [e - b, context]
//
// Promises:
//  - The split is deterministic: the last floor(size * validation_fraction) tokens (a
//    contiguous tail) are the validation split, the tokens before them the training split
//    (split_range). The two share no token.
//  - A split is cut into non-overlapping windows of context + 1 tokens, the first starting at
//    the split's first token (tokens after the last whole window are never used). A window's
//    first `context` tokens are a row of inputs and its last `context` tokens the same row of
//    targets, so targets[r, t] == inputs[r, t + 1] and targets[r, context - 1] is the token
//    after the window's inputs.
//  - Training: epoch e visits the windows in epoch_permutation(windows, seed, e) (data.h: a
//    Fisher-Yates shuffle fully specified, the same on every platform). Global batch g of an
//    epoch is the windows at [g * B, (g + 1) * B) of that order; the windows of a partial
//    last batch are left out of that epoch (batches_per_epoch() = windows / B). Validation:
//    the same, with the windows in file order in every epoch (a fixed evaluation set).
//  - Sharding: this object fills only rows [shard_begin, shard_end) of each global batch, so
//    the processes of a job that take the rows split_rows gives them see together exactly
//    the rows one process with the whole batch would, bit for bit.
//  - Position: the number of global batches drawn since position 0, across epochs (epoch =
//    position / batches_per_epoch()). It depends only on (file, split, options), not on the
//    shard, so every process of a job keeps the same one; seek(position()) on a new object
//    resumes with exactly the batches the first would have drawn next.
//  - Memory: nothing of the corpus is copied beyond the rows next() fills; training keeps
//    one permutation of the split's windows (8 bytes a window), made again when the epoch
//    changes.
//  - The TokenFile is referenced, not owned: it must outlive this object.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/ir/array.h"
#include "core/io/token_file.h"

namespace fjit::io {

struct TokenBatchOptions {
  int64_t context = 256;            // T, tokens per row (>= 1)
  int64_t global_batch = 8;         // B, rows of the whole replica group (>= 1)
  double validation_fraction = 0.1; // in [0, 1)
  uint64_t seed = 0;
};

enum class Split { kTrain, kValidation };

// Tokens [begin, end) of `split` in a file of `tokens` tokens (the rule above). Throws
// std::invalid_argument unless 0 <= validation_fraction < 1 and tokens >= 0.
std::pair<int64_t, int64_t> split_range(int64_t tokens, Split split, double validation_fraction);

class TokenBatches {
 public:
  // Throws std::invalid_argument naming the file's path for invalid options (context or
  // global_batch < 1, validation_fraction outside [0, 1)), rows not within 0 <= shard_begin
  // <= shard_end <= global_batch, or a split holding fewer windows than one global batch
  // ("corpus shorter than one batch", with the counts). Starts at position 0.
  TokenBatches(const TokenFile& file, Split split, TokenBatchOptions o, int64_t shard_begin,
               int64_t shard_end);

  int64_t batches_per_epoch() const { return windows_ / opt_.global_batch; }
  int64_t windows() const { return windows_; }  // whole windows in the split
  std::pair<int64_t, int64_t> tokens() const { return {begin_, end_}; }  // the split's tokens
  const TokenBatchOptions& options() const { return opt_; }
  int64_t rows() const { return shard_end_ - shard_begin_; }

  // Fills this process's rows of the global batch at position(): inputs and targets become
  // i32 [rows(), context]; then advances the position. An array that already has that dtype
  // and shape is written in place (through every Array sharing its storage); any other is
  // replaced by a new array. Throws std::invalid_argument if inputs and targets are one
  // array or share storage.
  void next(Array& inputs, Array& targets);

  int64_t position() const { return position_; }
  // Moves to `position` (>= 0; std::invalid_argument otherwise).
  void seek(int64_t position);
  int64_t epoch() const { return position_ / batches_per_epoch(); }  // of the next batch

  // The first token of the window in row `row` (of the global batch, in [0, global_batch))
  // of the global batch at `position`: what next() reads, for tests and reports.
  int64_t window_start(int64_t position, int64_t row);

 private:
  const TokenFile* file_;
  Split split_;
  TokenBatchOptions opt_;
  int64_t shard_begin_, shard_end_;
  int64_t begin_ = 0, end_ = 0, windows_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> perm_;  // training: the order of the windows in epoch perm_epoch_
  int64_t perm_epoch_ = -1;
};

}  // namespace fjit::io
