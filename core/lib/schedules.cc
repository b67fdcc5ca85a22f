#include "core/lib/schedules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "core/trace/ops.h"

namespace fjit {

struct Schedule::Node {
  enum class Kind { constant, linear, cosine, step_decay, warmup } kind;
  double a = 0, b = 0;  // constant: a | linear: from a to b | cosine: peak a, final b |
                        // step_decay: initial a, gamma b
  int64_t steps = 1;    // linear, cosine: length | step_decay: every | warmup: length
  std::shared_ptr<const Node> then;  // warmup only
};

namespace {

using Kind = Schedule::Node::Kind;

void require_steps(const char* what, int64_t steps) {
  if (steps < 1)
    throw std::invalid_argument(fmt::format("Schedule::{}: needs steps >= 1, got {}", what, steps));
}

double host_value(const Schedule::Node& n, double t) {
  t = std::max(t, 0.0);
  switch (n.kind) {
    case Kind::constant: return n.a;
    case Kind::linear: return t < n.steps ? n.a + (n.b - n.a) * (t / n.steps) : n.b;
    case Kind::cosine: {
      const double f = std::min(t, static_cast<double>(n.steps)) / n.steps;
      return n.b + (n.a - n.b) * (0.5 * (1.0 + std::cos(std::numbers::pi * f)));
    }
    case Kind::step_decay: return n.a * std::pow(n.b, std::floor(t / n.steps));
    case Kind::warmup:
      return t < n.steps ? host_value(*n.then, 0.0) * (t / n.steps) : host_value(*n.then, t - n.steps);
  }
  return 0;
}

// The host formula, as float64 ops of the trace; `t` is an f64 scalar >= 0.
Tensor traced_value(const Schedule::Node& n, const Tensor& t, Loc loc) {
  auto c = [&](double v) { return scalar(DType::f64, v, loc); };
  switch (n.kind) {
    case Kind::constant: return c(n.a);
    case Kind::linear:
      return where(lt(t, c(n.steps), loc), add(c(n.a), mul(c(n.b - n.a), div(t, c(n.steps), loc), loc), loc),
                   c(n.b), loc);
    case Kind::cosine: {
      const Tensor f = div(minimum(t, c(n.steps), loc), c(n.steps), loc);
      const Tensor half = mul(c(0.5), add(c(1.0), cos(mul(c(std::numbers::pi), f, loc), loc), loc), loc);
      return add(c(n.b), mul(c(n.a - n.b), half, loc), loc);
    }
    case Kind::step_decay: {
      // floor(t / every): t and every are integers, so the quotient is exact where it is an
      // integer and never rounds up to one where it is not; the cast truncates (t >= 0).
      const Tensor k = cast(cast(div(t, c(n.steps), loc), DType::i32, loc), DType::f64, loc);
      return mul(c(n.a), pow(c(n.b), k, loc), loc);
    }
    case Kind::warmup: {
      const Tensor ramp = mul(traced_value(*n.then, c(0.0), loc), div(t, c(n.steps), loc), loc);
      const Tensor later = traced_value(*n.then, maximum(sub(t, c(n.steps), loc), c(0.0), loc), loc);
      return where(lt(t, c(n.steps), loc), ramp, later, loc);
    }
  }
  return c(0);
}

std::string describe_node(const Schedule::Node& n) {
  switch (n.kind) {
    case Kind::constant: return fmt::format("constant {}", n.a);
    case Kind::linear: return fmt::format("linear {} to {} over {} steps", n.a, n.b, n.steps);
    case Kind::cosine: return fmt::format("cosine {} to {} over {} steps", n.a, n.b, n.steps);
    case Kind::step_decay: return fmt::format("{} times {} every {} steps", n.a, n.b, n.steps);
    case Kind::warmup: return fmt::format("warm-up {} steps, then {}", n.steps, describe_node(*n.then));
  }
  return "?";
}

}  // namespace

Schedule Schedule::constant(double value) {
  return Schedule(std::make_shared<const Node>(Node{Kind::constant, value, 0, 1, nullptr}));
}

Schedule Schedule::linear(double from, double to, int64_t steps) {
  require_steps("linear", steps);
  return Schedule(std::make_shared<const Node>(Node{Kind::linear, from, to, steps, nullptr}));
}

Schedule Schedule::cosine(double peak, int64_t steps, double final_value) {
  require_steps("cosine", steps);
  return Schedule(std::make_shared<const Node>(Node{Kind::cosine, peak, final_value, steps, nullptr}));
}

Schedule Schedule::step_decay(double initial, int64_t every, double gamma) {
  require_steps("step_decay", every);
  return Schedule(std::make_shared<const Node>(Node{Kind::step_decay, initial, gamma, every, nullptr}));
}

Schedule Schedule::warmup(int64_t steps, Schedule then) {
  require_steps("warmup", steps);
  return Schedule(std::make_shared<const Node>(Node{Kind::warmup, 0, 0, steps, then.node_}));
}

double Schedule::operator()(int64_t step) const { return host_value(*node_, static_cast<double>(step)); }

Tensor Schedule::operator()(const Tensor& step, DType dtype, Loc loc) const {
  if (step.rank() != 0 || step.dtype() == DType::boolean)
    throw TraceError(fmt::format("fjit: Schedule: the step must be a numeric scalar, got {} (at {}:{})",
                                 type_str(step.dtype(), step.shape()), loc.file_name(), loc.line()));
  if (dtype != DType::f32 && dtype != DType::f64)
    throw TraceError(fmt::format("fjit: Schedule: the value's dtype must be f32 or f64 (at {}:{})",
                                 loc.file_name(), loc.line()));
  const Tensor t = maximum(cast(step, DType::f64, loc), scalar(DType::f64, 0.0, loc), loc);
  return cast(traced_value(*node_, t, loc), dtype, loc);
}

std::string Schedule::describe() const { return describe_node(*node_); }

}  // namespace fjit
