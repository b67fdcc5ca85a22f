// The scalars a training run logs (TrainOptions::log_dir, --log-dir), through io::ScalarLog:
// JSON lines in <log_dir>/scalars.jsonl and a TensorBoard event file (core/io/scalar_log.h).
//
// Every log_every steps (or, with log_every 0, at the end of every epoch), at step = steps
// done (1-based, as the progress lines and checkpoint names count):
//   train/loss                 mean loss of the steps since the last write (skipped ones left out)
//   train/accuracy             their mean training-batch accuracy
//   train/grad_norm            their mean global gradient norm (after the all-reduce)
//   train/learning_rate        the learning rate of the last step
//   train/examples_per_second  examples trained since the last write over the time taken
//   checks/raised              checks raised in this process so far (fjit's metrics counter)
//   checks/skipped_steps       steps the check policy skipped in this run so far
// and at every evaluation:
//   eval/accuracy              test-set accuracy
// Only the primary replica writes; the others keep nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/io/progress.h"
#include "core/io/scalar_log.h"

namespace fjit::training {

class TrainScalars {
 public:
  // Writes nothing when `dir` is empty or `enabled` is false.
  TrainScalars(const std::string& dir, bool enabled, int64_t global_batch, int64_t log_every);

  // After each step: its stats, and the training-batch accuracy and gradient norm it reported.
  void on_step(const StepStats& s, double train_accuracy, double grad_norm);
  // After the last step of an epoch: `steps_done` so far, the test accuracy (< 0: none).
  void on_epoch_end(int64_t steps_done, double test_accuracy);

 private:
  void write_train(int64_t steps_done, double lr);

  std::unique_ptr<io::ScalarLog> log_;
  int64_t global_batch_, log_every_;
  int64_t window_start_ns_;
  int64_t window_steps_ = 0, window_good_ = 0, skipped_ = 0;
  double loss_ = 0, accuracy_ = 0, grad_norm_ = 0, last_lr_ = 0;
};

}  // namespace fjit::training
