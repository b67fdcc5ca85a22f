// Progress lines of a training run: every N steps and at the end of every epoch, the loss,
// accuracy (running over the epoch for training, the test set at epoch end), throughput,
// elapsed time and an estimate of the time left. Prints only where `enabled` (the primary
// replica); the others keep the counts so every process could report the same numbers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fjit::examples {

// What one training step reports to the host.
struct StepStats {
  int64_t step = 0;       // 0-based index of the batch in the whole run
  int64_t epoch = 0;
  int64_t batch = 0;      // index within the epoch
  bool skipped = false;   // the check policy discarded the step's outputs
  float loss = 0;         // mean over the global batch
  float accuracy = 0;     // of the global batch, before the update
  float grad_norm = 0;    // of the all-reduced gradient
  float lr = 0;           // learning rate of the step
};

class Progress {
 public:
  // total_steps: steps the run will take in all (for the ETA); first_step: where it starts
  // (non-zero when resuming).
  Progress(bool enabled, int64_t first_step, int64_t total_steps, int64_t steps_per_epoch,
           int64_t global_batch, int64_t log_every, std::FILE* out = stdout);

  void on_step(const StepStats& s);
  // After the last batch of `epoch`; test_accuracy < 0 when there is no test set.
  void on_epoch_end(int64_t epoch, double test_accuracy, double eval_seconds);
  // A free-form line, printed only where enabled.
  void note(const std::string& line);

  double elapsed_seconds() const;
  int64_t skipped_steps() const { return skipped_total_; }
  double epoch_train_accuracy() const { return epoch_steps_ ? epoch_acc_ / epoch_steps_ : 0; }
  double epoch_train_loss() const { return epoch_steps_ ? epoch_loss_ / epoch_steps_ : 0; }

 private:
  void print_step_line(const StepStats& s);
  std::string eta(int64_t steps_done_here) const;

  bool enabled_;
  std::FILE* out_;
  int64_t first_step_, total_steps_, steps_per_epoch_, global_batch_, log_every_;
  int64_t start_ns_, window_start_ns_;
  int64_t window_steps_ = 0, window_good_ = 0;
  double window_loss_ = 0;
  int64_t epoch_steps_ = 0;
  double epoch_loss_ = 0, epoch_acc_ = 0;
  int64_t steps_here_ = 0, skipped_total_ = 0;
  int64_t last_step_ = -1;
};

// "1m23s", "4.2s".
std::string format_duration(double seconds);

}  // namespace fjit::examples
