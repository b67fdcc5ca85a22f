// Training on data that runs out at different steps on different processes, as PyTorch DDP's
// join(): every process runs the same number of steps, and one whose data has run out joins
// the remaining steps with a zero-row batch. A zero-row shard has pmean weight 0 (pmap weights
// each replica by its share of the step's rows), and the mean of zero rows is 0 (ops.h), so
// each step's means are exact over the rows the other processes fed, and no process is left
// waiting in a collective for one that stopped.
//
//   JoinedBatches batches(mesh, io::BatchIterator(my_data, {.batch_size = 64, .seed = 7}));
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     batches.set_epoch(epoch);
//     while (const io::Batch* b = batches.next())   // mine, then zero rows once mine ran out
//       step(params, (*b)["x"], (*b)["y"]);
//   }
//
// Cost: JoinedBatches agrees on the steps of an epoch once, when it is built (one all-gather
// of one int64 per process): a BatchIterator knows how many batches each of its epochs has.
// For data whose length is not known in advance, Join::any agrees step by step (one
// all-reduce of one int per step):
//
//   Join join(mesh);
//   for (const io::Batch* b = stream.next(); join.any(b != nullptr); b = stream.next())
//     step(params, b ? (*b)["x"] : empty_x, b ? (*b)["y"] : empty_y);
//
// Every process must make the same calls (construction, set_epoch, seek, steps, any) at the
// same points, as for any collective. With one process (thread replicas) nothing is
// exchanged: its own counts are the job's.
#pragma once

#include <cstdint>

#include "core/io/data.h"
#include "parallel/mesh.h"

namespace fjit {

class Join {
 public:
  explicit Join(Mesh mesh) : mesh_(std::move(mesh)) {}
  // The most `local_steps` of any process: how many steps every process runs. One all-gather
  // of one int64 per process. REQUIRES local_steps >= 0 (std::invalid_argument otherwise).
  int64_t steps(int64_t local_steps) const;
  // True while any process has a batch for this step. One all-reduce of one int.
  bool any(bool has_batch) const;

 private:
  Mesh mesh_;
};

// A zero-row batch with `data`'s columns: each column's dtype and trailing extents, leading
// extent 0 (what a joined process feeds a step).
io::Batch empty_batch(const io::Dataset& data);

// A BatchIterator over this process's own data, extended to the steps every process runs.
class JoinedBatches {
 public:
  // Agrees with the other processes on the steps of an epoch (Join::steps of this process's
  // batches_per_epoch), here: every process builds its JoinedBatches at the same point.
  JoinedBatches(const Mesh& mesh, io::BatchIterator batches);

  // This process's next batch while it has one, then its zero-row batch (joined() is true;
  // epoch and index are set as for a real batch) until the epoch's steps are done: nullptr.
  const io::Batch* next();
  // Moves to the start of `epoch`, or to step `step` of it (0 <= step <= steps_per_epoch();
  // std::invalid_argument otherwise): how a resumed run continues.
  void set_epoch(int64_t epoch) { seek(epoch, 0); }
  void seek(int64_t epoch, int64_t step);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }  // the same on every process
  int64_t epoch() const { return batches_.epoch(); }
  // True when the last batch next() returned was the zero-row one.
  bool joined() const { return joined_; }
  const io::BatchIterator& batches() const { return batches_; }

 private:
  io::BatchIterator batches_;
  int64_t steps_per_epoch_ = 0;
  int64_t next_step_ = 0;
  bool joined_ = false;
  io::Batch empty_;
};

}  // namespace fjit
