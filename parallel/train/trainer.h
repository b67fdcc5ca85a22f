// Trainer: the training loop of a classifier (parallel/train/model.h) — parameters and AdamW
// state, the data order, the pmap'd step, evaluation and checkpoints — usable a step at a time
// (tests, the poisoned-batch example) or as a whole run with progress lines (run()). The
// examples' programs run it through train_main (parallel/train/train_main.h).
//
// Promises:
//  - Deterministic: the data order comes from (seed, epoch) through io::BatchIterator, the
//    initial parameters from the seed, and each step is the same compiled plan, so two runs
//    with the same options produce bit-identical parameters.
//  - A checkpoint holds params, optimizer state, seed and the position in the data (step,
//    epoch, batch within the epoch); a run resumed from it continues bit-for-bit as the
//    uninterrupted run would have.
//  - Steps allocate no parameter memory: params/state are double-buffered and the step writes
//    into the buffer it did not read (pmap's run_into).
//  - Every replica (thread or MPI rank) runs the same sequence of calls; under MPI every rank
//    holds the whole data set and reads its replicas' rows of each global batch
//    (io::BatchIterator with Mesh::data_shard()), or, with examples_per_process, its own
//    part of it, the parts of any sizes: every process runs the epoch's steps of the process
//    with the most batches, one whose part has run out with zero rows (JoinedBatches,
//    parallel/join.h), so the job ends normally and each step's mean is over the rows fed.
//  - With loss scaling (options.grad_dtype f16 or options.loss_scale), the scale is an input of
//    each step and moves by DynamicLossScale (core/lib/loss_scale.h) after it: a step whose
//    loss_scale_overflow check raised was skipped (the run needs the skip_step policy, its
//    default then; checks off or another policy is refused) and backs the scale off. The
//    scale and its count of good steps are in checkpoints, so a resumed run is exact.
//  - A checkpoint records the run's configuration (run_config); resuming with a different
//    model, optimizer or schedule is refused with the differences listed, unless
//    allow_config_change. Another model (--model, --layers, --dropout) is refused first,
//    naming both.
//  - Resuming requires the checkpoint's whole-file checksum (io::require_checksum) and
//    cross-checks its header against its tensors: step = epoch * batches per epoch + batch,
//    and opt/step = step - skipped steps; a mismatch is refused naming the file and both values.
//  - Certified runs: every checkpoint carries the SHA-256 of its tensors chained to the previous
//    checkpoint's (io/state_hash.h; verified at load), the command line and replica count that
//    made it, and each step's loss and gradient norm (bits) since the previous checkpoint, so
//    that verify_interval (parallel/train/verify.h) can re-execute the interval.
//  - With options.zero_stage 1 or 2 (ZeRO, parallel/train/zero.h), optimizer_state() holds
//    this process's replicas' shards of the state, and the parameters are bit-identical to
//    the replicated run's. Its checkpoints hold the whole state (zero_gather_state), the
//    same file the replicated run writes; load reshards it for this run's replica count
//    (zero_shard_state). The divergence check is refused with it. With zero_stage 3 the
//    parameters are sharded too (local_params(); params() gathers them), and checkpoints
//    hold the whole parameters.
//  - run() checks every output path (checkpoint_dir, log_dir, FJIT_TIMELINE, ...) before the
//    first step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/data.h"
#include "core/io/output_paths.h"
#include "core/io/progress.h"
#include "core/lib/loss_scale.h"
#include "parallel/join.h"
#include "parallel/mesh.h"
#include "parallel/train/model.h"
#include "parallel/train/train_options.h"
#include "parallel/train/train_step.h"

namespace fjit::training {

class Trainer {
 public:
  // `test` may be empty (no evaluation). Throws std::invalid_argument when the data do not
  // fit the model (image size vs. model.inputs), the global batch is smaller than the mesh, or
  // examples_per_process does not list one count per process within the training set.
  Trainer(Mesh mesh, TrainOptions options, Model model, io::Dataset train, io::Dataset test = {});

  // This process's rows of the global batch at the current position, advancing it (to the
  // next epoch when one is done); nullptr once every epoch is done. The batch is the
  // iterator's: valid until the next call.
  const io::Batch* next_batch();
  // One training step on a batch from next_batch() (or a changed copy of one). May throw
  // CheckError (throw policy) or ReplicaMismatchError (divergence check).
  StepStats train_on(const io::Batch& batch);
  // next_batch() + train_on(); nullopt when the run is over (epochs or max_steps).
  std::optional<StepStats> step();
  // True when the run is over: every epoch done, or max_steps reached.
  bool done() const;

  // Test-set accuracy of the current parameters (every replica must call it).
  double evaluate();

  // Writes a checkpoint (primary replica only; under MPI the others wait at a barrier until
  // the file is complete). Creates the directory if needed.
  void save(const std::string& path);
  // Restores parameters, optimizer state and the data position. Replica 0 reads and verifies
  // the file and broadcasts what it holds to the other MPI ranks (which need not see it).
  // Throws std::runtime_error on every rank when it does not match the model or the batch size.
  void load(const std::string& path);

  // The whole run: progress lines, evaluation at each epoch end, checkpoints every
  // checkpoint_every steps and at the end (when checkpoint_dir is set), scalars as JSON lines
  // and TensorBoard events (when log_dir is set: train_scalars.h), starting from the latest
  // checkpoint with options.resume. Returns the final test accuracy (or -1).
  double run();
  // A Progress configured for this run from the current position (prints on the primary
  // replica only).
  Progress make_progress() const;

  // The whole parameters. At --zero 3 they are gathered from the replicas' shards (under MPI
  // an all-gather: every process must call it).
  ArrayDict params() const;
  // What this process holds: the whole parameters, or at --zero 3 its replicas' shards.
  const ArrayDict& local_params() const { return std::get<0>(buffers_[current_]); }
  const ArrayDict& optimizer_state() const { return std::get<1>(buffers_[current_]); }
  // The whole optimizer state (gathered with ZeRO: every process must call it).
  ArrayDict whole_optimizer_state() const;
  int64_t steps_done() const { return steps_done_; }
  // What the last train_on reported besides its StepStats: the batch's accuracy and the
  // global norm of the averaged gradient.
  double last_train_accuracy() const { return last_accuracy_; }
  double last_grad_norm() const { return last_grad_norm_; }
  // Steps the last run() took (not counting those before the checkpoint it resumed from).
  int64_t steps_this_run() const { return steps_done_ - run_started_at_; }
  int64_t epoch() const { return epoch_; }
  // What each step since the last checkpoint saved or loaded reported (step_record).
  const std::vector<std::string>& step_records() const { return step_records_; }
  int64_t batch_in_epoch() const { return batch_in_epoch_; }
  // Steps of an epoch, the same on every process (with examples_per_process: the most batches
  // of any process's part).
  int64_t batches_per_epoch() const { return batches_.steps_per_epoch(); }
  int64_t total_steps() const;
  // The learning rate of step `step` (0-based) under the schedule: a function of the step and
  // of epochs * batches_per_epoch only, so a resumed or poisoned run sees the same values.
  double learning_rate(int64_t step) const;
  const Mesh& mesh() const { return mesh_; }
  const TrainOptions& options() const { return options_; }
  const Model& model() const { return model_; }
  TrainStep& train_step() { return train_step_; }
  // The loss scale's policy; null when the run does not scale its loss.
  DynamicLossScale* loss_scale() { return scaler_ ? &*scaler_ : nullptr; }
  const DynamicLossScale* loss_scale() const { return scaler_ ? &*scaler_ : nullptr; }

 private:
  PmapOptions pmap_options(const char* name) const;
  void save_at_step();
  static JoinedBatches make_batches(const io::Dataset& train, const TrainOptions& o,
                                    const Mesh& mesh);

  Mesh mesh_;
  TrainOptions options_;
  Model model_;
  io::Dataset train_, test_;
  JoinedBatches batches_;
  Schedule schedule_;
  TrainStep train_step_;
  EvalStep eval_step_;
  // Double buffer: step k reads buffers_[current_] and writes buffers_[1 - current_].
  TrainStepOut buffers_[2];
  std::vector<ZeroParamShape> zero3_shapes_;  // at --zero 3: the parameters the step gathers
  int current_ = 0;
  bool buffers_conformed_ = false;
  Array step_;                   // i32 scalar argument of the step: its index in the run
  Array scale_;                  // f32 scalar argument of the step: the loss scale (1: none)
  std::optional<DynamicLossScale> scaler_;
  int64_t steps_done_ = 0;       // batches consumed, skipped ones included
  int64_t epoch_ = 0;            // of the next batch
  int64_t batch_in_epoch_ = 0;   // of the next batch
  int64_t skipped_steps_ = 0;    // of steps_done_, those a check skipped (no update)
  // The hash chain (io/state_hash.h): the last checkpoint's link (the primary's), and what
  // each step since then reported (step:loss bits:gradient norm bits), for fjit_verify.
  std::string chain_;
  std::vector<std::string> step_records_;
  int64_t run_started_at_ = 0;   // steps_done_ when run() began training
  double last_accuracy_ = 0, last_grad_norm_ = 0;
};

// Mesh::from_environment ("--replicas N" or "--replicas=N") that leaves argv as it is, for
// the examples' own option parser.
Mesh mesh_from_command_line(int argc, char** argv);

// The row of `batch` (this process's rows of a global batch, from Trainer::next_batch) where
// replica `replica`'s shard begins, or -1 when another process feeds that replica.
int64_t first_row_of_replica(const Mesh& mesh, const io::Batch& batch, int replica);

// The checkpoint's tensors: "params/<name>" and "opt/<name>".
io::NamedArrays checkpoint_tensors(const ArrayDict& params, const ArrayDict& state);
// Replaces params' and state's arrays by the checkpoint's "params/<name>" and "opt/<name>"
// (the names they have; check_compatible first).
void read_checkpoint_tensors(const io::Checkpoint& ck, ArrayDict& params, ArrayDict& state);

// What a step reports to a certified run: "<step>:<loss bits>:<gradient norm bits>" (hex),
// `step` counting from 1.
std::string step_record(int64_t step, float loss, float grad_norm);

// Refuses (std::runtime_error naming the file and both counts) a checkpoint whose header says
// `steps` steps were taken, `skipped` of them skipped, when its optimizer's update counter
// (the tensor opt/step, when the optimizer keeps one) says otherwise.
void check_update_count(const io::Checkpoint& ck, int64_t steps, int64_t skipped);

// Checks, before the first step, that every path the run writes can be written
// (io::check_output_paths); fails every process when the primary's check fails.
void check_run_outputs(const Mesh& mesh, const io::OutputPaths& paths);

// Puts d's entries in the order of `like`'s names (the same set of names): a step's double
// buffer must list its arrays in the order the step writes them.
void conform(ArrayDict& d, const ArrayDict& like);

}  // namespace fjit::training
