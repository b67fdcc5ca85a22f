// In-memory data sets and deterministic, shuffled, sharded mini-batches over them.
//
//   io::Dataset train({{"images", images}, {"labels", labels}});   // or io::load_idx_dataset
//   io::BatchIterator batches(train, {.batch_size = 128, .seed = 7, .shard = mesh.data_shard()});
//   while (const io::Batch* b = batches.next()) step(params, (*b)["images"], (*b)["labels"]);
//
// Promises:
//  - The order of epoch e depends only on (seed, e, number of examples): a Fisher-Yates
//    shuffle driven by std::mt19937_64 seeded with seed + e. Both the engine's output and the
//    shuffle are fully specified, so the order is the same on every platform and standard
//    library (std::shuffle and std::uniform_int_distribution are not, which is why they are
//    not used). A run resumed with seek() sees the batches it would have seen.
//  - Sharding: batch_size is the global batch. A process that runs replicas
//    [shard.first, shard.first + shard.count) of shard.of gets exactly those replicas' rows
//    of each global batch (split_rows, the split pmap uses), so the processes of a job
//    together see every row of every global batch once, and a job gives the same batches
//    whether its replicas are threads of one process or ranks of several.
//  - Batches are copied into buffers allocated once, in the constructor: iterating allocates
//    nothing, and every full batch has the same shape, so a jitted step compiles once. The
//    Batch next() points to, and the Arrays it holds, are the iterator's: the next call to
//    next() overwrites them (clone() a batch to keep it).
//  - With drop_last, a final partial batch is skipped (the usual choice for training, as a
//    smaller last batch means a second signature to compile); without it, the last batch is
//    smaller and comes from a second set of buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/split_rows.h"
#include "core/ir/array.h"
#include "core/trace/dict.h"

namespace fjit::io {

// Part `part`'s [begin, end) rows of `rows` split over `parts` parts (core/base/split_rows.h).
using fjit::split_rows;

// Which replicas of a job this process feeds (parallel/mesh.h: Mesh::data_shard()).
struct Shard {
  int first = 0;  // job-wide index of this process's first replica
  int count = 1;  // replicas in this process
  int of = 1;     // replicas in the job
  // This process's [begin, end) rows of a global batch of `rows`.
  std::pair<int64_t, int64_t> rows(int64_t global_rows) const;
};

// Named columns of examples, every one with the same leading extent (the example count).
class Dataset {
 public:
  Dataset() = default;
  // REQUIRES at least one column, each a defined Array of rank >= 1, all with the same
  // leading extent; throws std::invalid_argument naming the columns and their types.
  explicit Dataset(ArrayDict columns);

  int64_t size() const { return size_; }  // examples
  bool empty() const { return columns_.size() == 0; }
  // Throws std::out_of_range naming the columns there are.
  const Array& operator[](const std::string& name) const { return columns_.at(name); }
  const ArrayDict& columns() const { return columns_; }
  // Examples [begin, end) as a data set of their own: row views of these columns (no copy).
  // REQUIRES 0 <= begin <= end <= size() (std::out_of_range naming the range otherwise).
  Dataset rows(int64_t begin, int64_t end) const;

 private:
  ArrayDict columns_;
  int64_t size_ = 0;
};

struct Batch {
  ArrayDict columns;        // this shard's rows of the global batch, column by column
  int64_t epoch = 0;
  int64_t index = 0;        // batch number within the epoch, from 0
  int64_t global_rows = 0;  // rows of the global batch (over every shard)
  const Array& operator[](const std::string& name) const { return columns.at(name); }
  Batch clone() const;      // a copy that owns its arrays
};

struct BatchOptions {
  int64_t batch_size = 128;  // global: split over Shard::of replicas
  uint64_t seed = 0;
  bool shuffle = true;       // false: examples in their stored order (for evaluation)
  bool drop_last = true;
  Shard shard;               // default: one process holding the whole batch
};

class BatchIterator {
 public:
  // Requires batch_size >= 1, a non-empty data set, and a valid shard (0 <= first,
  // 1 <= count, first + count <= of). Throws std::invalid_argument otherwise. Starts at
  // epoch 0, batch 0.
  BatchIterator(Dataset data, BatchOptions options);

  // The next batch of the current epoch, or nullptr when the epoch is done (call set_epoch
  // to go on). Valid until the next call.
  const Batch* next();

  // Moves to the start of `epoch` (>= 0), computing its permutation.
  void set_epoch(int64_t epoch);
  // Moves to batch `index` of `epoch`: how a run restored from a checkpoint resumes.
  void seek(int64_t epoch, int64_t index);

  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const;
  int64_t num_examples() const { return data_.size(); }
  const Dataset& data() const { return data_; }
  const BatchOptions& options() const { return opt_; }
  // The order of example indices for the current epoch.
  const std::vector<int64_t>& permutation() const { return perm_; }

 private:
  void fill(Array& dst, const Array& src, int64_t first, int64_t count) const;

  Dataset data_;
  BatchOptions opt_;
  int64_t epoch_ = 0;
  int64_t next_index_ = 0;
  std::vector<int64_t> perm_;
  Batch full_, partial_;  // this shard's rows of a full / the final partial batch
};

// The permutation of 0..n-1 that BatchIterator uses for (seed, epoch); exposed for tests.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace fjit::io
