#include "lib/train_progress.h"

#include <fmt/format.h>

#include <cmath>

#include "core/runtime/metrics.h"

namespace fjit::examples {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

Progress::Progress(bool enabled, int64_t first_step, int64_t total_steps, int64_t steps_per_epoch,
                   int64_t global_batch, int64_t log_every, std::FILE* out)
    : enabled_(enabled),
      out_(out),
      first_step_(first_step),
      total_steps_(total_steps),
      steps_per_epoch_(steps_per_epoch),
      global_batch_(global_batch),
      log_every_(log_every),
      start_ns_(now_ns()),
      window_start_ns_(start_ns_) {}

double Progress::elapsed_seconds() const { return (now_ns() - start_ns_) * 1e-9; }

std::string Progress::eta(int64_t steps_done_here) const {
  const int64_t left = total_steps_ - (first_step_ + steps_done_here);
  if (steps_done_here == 0 || left < 0) return "?";
  return format_duration(elapsed_seconds() / steps_done_here * left);
}

void Progress::on_step(const StepStats& s) {
  ++steps_here_;
  ++window_steps_;
  last_step_ = s.step;
  if (s.skipped) {
    ++skipped_total_;
  } else {
    ++window_good_;
    window_loss_ += s.loss;
    ++epoch_steps_;
    epoch_loss_ += s.loss;
    epoch_acc_ += s.accuracy;
  }
  if (s.skipped && enabled_)
    fmt::print(out_, "step {}: skipped by the check policy (see the check report above)\n", s.step + 1);
  if (log_every_ > 0 && (s.step + 1) % log_every_ == 0) print_step_line(s);
}

void Progress::print_step_line(const StepStats& s) {
  const int64_t now = now_ns();
  const double window_s = (now - window_start_ns_) * 1e-9;
  const double rate = window_s > 0 ? window_steps_ * global_batch_ / window_s : 0;
  if (enabled_) {
    fmt::print(out_,
               "epoch {:>2} step {:>6}/{} | loss {:.4f} | train acc {:5.2f}% | lr {:.2e} | "
               "{:>5.0f} samples/s | elapsed {} | ETA {}\n",
               s.epoch + 1, s.step + 1, total_steps_,
               window_good_ ? window_loss_ / window_good_ : NAN, 100.0 * epoch_train_accuracy(), s.lr,
               rate, format_duration(elapsed_seconds()), eta(steps_here_));
    std::fflush(out_);
  }
  window_start_ns_ = now;
  window_steps_ = window_good_ = 0;
  window_loss_ = 0;
}

void Progress::on_epoch_end(int64_t epoch, double test_accuracy, double eval_seconds) {
  if (enabled_) {
    std::string test = test_accuracy >= 0
                           ? fmt::format(" | test acc {:5.2f}% (eval {:.1f}s)", 100 * test_accuracy,
                                         eval_seconds)
                           : std::string();
    fmt::print(out_, "== epoch {:>2} done | train loss {:.4f} | train acc {:5.2f}%{} | elapsed {} | ETA {}\n",
               epoch + 1, epoch_train_loss(), 100.0 * epoch_train_accuracy(), test,
               format_duration(elapsed_seconds()), eta(steps_here_));
    std::fflush(out_);
  }
  epoch_steps_ = 0;
  epoch_loss_ = epoch_acc_ = 0;
}

void Progress::note(const std::string& line) {
  if (!enabled_) return;
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
}

}  // namespace fjit::examples
