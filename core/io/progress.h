// Progress lines of a training run: every N steps and at the end of every epoch, the loss,
// the run's own metrics (running means over the epoch), throughput, elapsed time and an
// estimate of the time left.
//
//   epoch  1 step    100/4680 | loss 0.6413 | train acc 77.95% | lr 9.99e-04 | 41843 samples/s | elapsed 0.3s | ETA 14.0s
//   == epoch  1 done | train loss 0.4708 | train acc 83.26% | test acc 84.72% (eval 0.0s) | elapsed 1.4s | ETA 12.6s
//
// Prints only where `enabled` (the primary replica); the others keep the same counts, so
// every process could report the same numbers. A skipped step (a check policy discarded its
// outputs) is counted and reported but left out of the means.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fjit {

struct Metric {
  std::string name;      // "train acc"
  double value = 0;
  bool percent = false;  // printed as 100 * value with a % sign
};

// What one training step reports to the host.
struct StepStats {
  int64_t step = 0;       // 0-based index of the batch in the whole run
  int64_t epoch = 0;
  int64_t batch = 0;      // index within the epoch
  bool skipped = false;   // the check policy discarded the step's outputs
  double loss = 0;        // mean over the global batch
  double lr = 0;          // learning rate of the step
  std::vector<Metric> metrics;  // averaged over the epoch's steps, in this order
};

struct ProgressOptions {
  bool enabled = true;          // print (the primary replica); counting happens regardless
  int64_t first_step = 0;       // where the run starts (non-zero when resuming)
  int64_t total_steps = 0;      // steps of the run in all, for the ETA
  int64_t global_batch = 1;     // examples (or tokens) per step, for the throughput
  std::string unit = "samples"; // what global_batch counts: "<unit>/s" in the step lines
  int64_t log_every = 100;      // steps between step lines; 0: epoch lines only
  std::FILE* out = stdout;
};

class Progress {
 public:
  explicit Progress(ProgressOptions options);

  void on_step(const StepStats& s);
  // After the last batch of `epoch`: the epoch's training means, then `eval` (say, test
  // accuracy) measured in eval_seconds.
  void on_epoch_end(int64_t epoch, const std::vector<Metric>& eval = {}, double eval_seconds = 0);
  // A free-form line, printed only where enabled.
  void note(const std::string& line);

  double elapsed_seconds() const;
  int64_t skipped_steps() const { return skipped_total_; }
  double epoch_train_loss() const { return epoch_steps_ ? epoch_loss_ / epoch_steps_ : 0; }
  // The epoch's running mean of the metric called `name` (0 when there is none).
  double epoch_metric(const std::string& name) const;

 private:
  void print_step_line(const StepStats& s);
  std::string eta(int64_t steps_done_here) const;
  std::string metrics_text() const;

  ProgressOptions opt_;
  int64_t start_ns_, window_start_ns_;
  int64_t window_steps_ = 0, window_good_ = 0;
  double window_loss_ = 0;
  int64_t epoch_steps_ = 0;
  double epoch_loss_ = 0;
  std::vector<Metric> epoch_sums_;  // sums over the epoch's good steps
  int64_t steps_here_ = 0, skipped_total_ = 0;
};

// "1m23s", "4.2s".
std::string format_duration(double seconds);

}  // namespace fjit
