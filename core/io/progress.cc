#include "core/io/progress.h"

#include <fmt/format.h>

#include <cmath>

#include "core/base/metrics.h"

namespace fjit {
namespace {

std::string metric_text(const Metric& m, double value) {
  return m.percent ? fmt::format("{} {:5.2f}%", m.name, 100 * value)
                   : fmt::format("{} {:.4g}", m.name, value);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

Progress::Progress(ProgressOptions options)
    : opt_(options), start_ns_(now_ns()), window_start_ns_(start_ns_) {}

double Progress::elapsed_seconds() const { return (now_ns() - start_ns_) * 1e-9; }

std::string Progress::eta(int64_t steps_done_here) const {
  const int64_t left = opt_.total_steps - (opt_.first_step + steps_done_here);
  if (steps_done_here == 0 || left < 0) return "?";
  return format_duration(elapsed_seconds() / steps_done_here * left);
}

double Progress::epoch_metric(const std::string& name) const {
  for (const Metric& m : epoch_sums_)
    if (m.name == name) return epoch_steps_ ? m.value / epoch_steps_ : 0;
  return 0;
}

std::string Progress::metrics_text() const {
  std::string out;
  for (const Metric& m : epoch_sums_)
    out += " | " + metric_text(m, epoch_steps_ ? m.value / epoch_steps_ : 0);
  return out;
}

void Progress::on_step(const StepStats& s) {
  ++steps_here_;
  ++window_steps_;
  if (s.skipped) {
    ++skipped_total_;
  } else {
    ++window_good_;
    window_loss_ += s.loss;
    ++epoch_steps_;
    epoch_loss_ += s.loss;
    for (const Metric& m : s.metrics) {
      Metric* sum = nullptr;
      for (Metric& e : epoch_sums_)
        if (e.name == m.name) sum = &e;
      if (!sum) sum = &epoch_sums_.emplace_back(Metric{m.name, 0, m.percent});
      sum->value += m.value;
    }
  }
  if (s.skipped && opt_.enabled)
    fmt::print(opt_.out, "step {}: skipped by the check policy (see the check report above)\n", s.step + 1);
  if (opt_.log_every > 0 && (s.step + 1) % opt_.log_every == 0) print_step_line(s);
}

void Progress::print_step_line(const StepStats& s) {
  const int64_t now = now_ns();
  const double window_s = (now - window_start_ns_) * 1e-9;
  const double rate = window_s > 0 ? window_steps_ * opt_.global_batch / window_s : 0;
  if (opt_.enabled) {
    fmt::print(opt_.out,
               "epoch {:>2} step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | {:>5.0f} {}/s | "
               "elapsed {} | ETA {}\n",
               s.epoch + 1, s.step + 1, opt_.total_steps,
               window_good_ ? window_loss_ / window_good_ : NAN, metrics_text(), s.lr, rate, opt_.unit,
               format_duration(elapsed_seconds()), eta(steps_here_));
    std::fflush(opt_.out);
  }
  window_start_ns_ = now;
  window_steps_ = window_good_ = 0;
  window_loss_ = 0;
}

void Progress::on_epoch_end(int64_t epoch, const std::vector<Metric>& eval, double eval_seconds) {
  if (opt_.enabled) {
    std::string evals;
    for (const Metric& m : eval) evals += " | " + metric_text(m, m.value);
    if (!eval.empty()) evals += fmt::format(" (eval {:.1f}s)", eval_seconds);
    std::string train;
    for (const Metric& m : epoch_sums_) train += " | " + metric_text(m, epoch_metric(m.name));
    fmt::print(opt_.out, "== epoch {:>2} done | train loss {:.4f}{}{} | elapsed {} | ETA {}\n",
               epoch + 1, epoch_train_loss(), train, evals, format_duration(elapsed_seconds()),
               eta(steps_here_));
    std::fflush(opt_.out);
  }
  epoch_steps_ = 0;
  epoch_loss_ = 0;
  for (Metric& m : epoch_sums_) m.value = 0;
}

void Progress::note(const std::string& line) {
  if (!opt_.enabled) return;
  fmt::print(opt_.out, "{}\n", line);
  std::fflush(opt_.out);
}

}  // namespace fjit
