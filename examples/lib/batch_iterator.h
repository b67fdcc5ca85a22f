// BatchIterator: deterministic, shuffled mini-batches over a data set held in two Arrays.
//
// Promises:
//  - The order of epoch e depends only on (seed, e, number of examples): it is a Fisher-Yates
//    shuffle driven by std::mt19937_64 seeded with seed + e. Both the engine's output and our
//    shuffle are fully specified, so the order is the same on every platform and standard
//    library (std::shuffle and std::uniform_int_distribution are not, which is why they are
//    not used). A run resumed from a checkpoint therefore sees the batches it would have seen.
//  - Batches are copied into buffers allocated once, in the constructor: iterating allocates
//    nothing, and every full batch has the same shape, so a jitted step compiles once. The
//    Arrays a Batch holds share those buffers: the next call to next() overwrites them
//    (clone() a batch to keep it).
//  - With drop_last, a final partial batch is skipped (the usual choice for training, as a
//    smaller last batch means a second signature to compile); without it, the last batch is
//    smaller and comes from a second pair of buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/ir/array.h"

namespace fjit::io {

struct Batch {
  Array images;         // [batch, ...] rows of the images array, in permutation order
  Array labels;         // [batch, ...] the matching rows of the labels array
  int64_t epoch = 0;
  int64_t index = 0;    // batch number within the epoch, from 0
};

struct BatchOptions {
  int64_t batch_size = 128;
  uint64_t seed = 0;
  bool shuffle = true;    // false: examples in their stored order (for evaluation)
  bool drop_last = true;
};

class BatchIterator {
 public:
  // Requires images and labels to have rank >= 1, the same leading extent N, and
  // batch_size >= 1. Throws std::invalid_argument otherwise. Starts at epoch 0, batch 0.
  BatchIterator(Array images, Array labels, BatchOptions options);

  // The next batch of the current epoch, or nullopt when the epoch is done (call
  // set_epoch to go on). Typical use:  while (auto b = it.next()) step(b->images, b->labels);
  std::optional<Batch> next();

  // Moves to the start of `epoch` (>= 0), computing its permutation.
  void set_epoch(int64_t epoch);
  // Moves to batch `index` of `epoch`: how a run restored from a checkpoint resumes.
  void seek(int64_t epoch, int64_t index);

  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const;
  int64_t num_examples() const { return n_; }
  // The order of example indices for the current epoch.
  const std::vector<int64_t>& permutation() const { return perm_; }

 private:
  void fill(Array& dst, const Array& src, int64_t first, int64_t count) const;

  Array images_, labels_;
  BatchOptions opt_;
  int64_t n_ = 0;
  int64_t epoch_ = 0;
  int64_t next_index_ = 0;
  std::vector<int64_t> perm_;
  Array full_images_, full_labels_;        // [batch_size, ...]
  Array partial_images_, partial_labels_;  // [N % batch_size, ...] when that is kept
};

// The permutation of 0..n-1 that BatchIterator uses for (seed, epoch); exposed for tests.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace fjit::io
