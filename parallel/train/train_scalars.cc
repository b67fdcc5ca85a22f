// The trainer's scalars (see parallel/train/train_scalars.h).
#include "parallel/train/train_scalars.h"

#include "core/base/metrics.h"

namespace fjit::training {

TrainScalars::TrainScalars(const std::string& dir, bool enabled, int64_t global_batch,
                           int64_t log_every)
    : global_batch_(global_batch), log_every_(log_every), window_start_ns_(now_ns()) {
  if (enabled && !dir.empty()) log_ = std::make_unique<io::ScalarLog>(dir);
}

void TrainScalars::on_step(const StepStats& s, double train_accuracy, double grad_norm) {
  if (!log_) return;
  ++window_steps_;
  last_lr_ = s.lr;
  if (s.skipped) {
    ++skipped_;
  } else {
    ++window_good_;
    loss_ += s.loss;
    accuracy_ += train_accuracy;
    grad_norm_ += grad_norm;
  }
  if (log_every_ > 0 && (s.step + 1) % log_every_ == 0) write_train(s.step + 1, s.lr);
}

void TrainScalars::on_epoch_end(int64_t steps_done, double test_accuracy) {
  if (!log_) return;
  if (log_every_ == 0) write_train(steps_done, last_lr_);
  if (test_accuracy >= 0) log_->write(steps_done, "eval/accuracy", test_accuracy);
  log_->flush();
}

void TrainScalars::write_train(int64_t steps_done, double lr) {
  const int64_t now = now_ns();
  const double seconds = (now - window_start_ns_) * 1e-9;
  if (window_good_ > 0) {
    const double n = static_cast<double>(window_good_);
    log_->write(steps_done, "train/loss", loss_ / n);
    log_->write(steps_done, "train/accuracy", accuracy_ / n);
    log_->write(steps_done, "train/grad_norm", grad_norm_ / n);
  }
  log_->write(steps_done, "train/learning_rate", lr);
  if (seconds > 0)
    log_->write(steps_done, "train/examples_per_second", window_steps_ * global_batch_ / seconds);
  log_->write(steps_done, "checks/raised", static_cast<double>(metrics().checks_raised.load()));
  log_->write(steps_done, "checks/skipped_steps", static_cast<double>(skipped_));
  log_->flush();
  window_start_ns_ = now;
  window_steps_ = window_good_ = 0;
  loss_ = accuracy_ = grad_norm_ = 0;
}

}  // namespace fjit::training
