#include "core/lib/loss_scale.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace fjit {
namespace {

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

float as_f32(double v, const char* what) {
  if (!positive_finite(v) || v > std::numeric_limits<float>::max() || static_cast<float>(v) == 0.0f)
    throw std::invalid_argument(fmt::format("DynamicLossScale: {} {} is not a positive f32 value", what, v));
  return static_cast<float>(v);
}

}  // namespace

bool needs_loss_scale(DType grad_dtype) { return grad_dtype == DType::f16; }

bool parse_loss_scale(const std::string& text, LossScaleOptions* out) {
  if (text == "dynamic") {
    *out = LossScaleOptions{};
    return true;
  }
  if (text.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !positive_finite(v) || v > std::numeric_limits<float>::max())
    return false;
  *out = LossScaleOptions{};
  out->dynamic = false;
  out->init_scale = v;
  out->min_scale = std::min(out->min_scale, v);
  out->max_scale = std::max(out->max_scale, v);
  return true;
}

DynamicLossScale::DynamicLossScale(LossScaleOptions o) : options_(o) {
  as_f32(o.min_scale, "min_scale");
  as_f32(o.max_scale, "max_scale");
  scale_ = as_f32(o.init_scale, "init_scale");
  if (o.init_scale < o.min_scale || o.init_scale > o.max_scale)
    throw std::invalid_argument(fmt::format("DynamicLossScale: init_scale {} is outside [min_scale {}, max_scale {}]",
                                            o.init_scale, o.min_scale, o.max_scale));
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    throw std::invalid_argument(fmt::format("DynamicLossScale: growth_factor {} must be above 1", o.growth_factor));
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    throw std::invalid_argument(fmt::format("DynamicLossScale: backoff_factor {} must be in (0, 1)", o.backoff_factor));
  if (o.growth_interval < 1)
    throw std::invalid_argument(fmt::format("DynamicLossScale: growth_interval {} must be at least 1", o.growth_interval));
}

void DynamicLossScale::set_scale(double scale) {
  scale_ = as_f32(scale, "scale");
  good_steps_ = 0;
}

bool DynamicLossScale::update(bool overflow, bool skipped) {
  if (!options_.dynamic) return false;
  const float before = scale_;
  if (overflow) {
    set_scale(std::max(static_cast<double>(scale_) * options_.backoff_factor, options_.min_scale));
  } else if (!skipped && ++good_steps_ >= options_.growth_interval) {
    set_scale(std::min(static_cast<double>(scale_) * options_.growth_factor, options_.max_scale));
  }
  return scale_ != before;
}

std::string DynamicLossScale::state() const {
  return fmt::format("{} {}", static_cast<double>(scale_), good_steps_);  // shortest round trip
}

void DynamicLossScale::set_state(const std::string& state) {
  std::istringstream in(state);
  double scale = 0;
  int64_t good = -1;
  std::string rest;
  if (!(in >> scale >> good) || (in >> rest) || good < 0 || !positive_finite(scale))
    throw std::invalid_argument("DynamicLossScale: bad state '" + state + "' (expected '<scale> <good steps>')");
  scale_ = as_f32(scale, "scale");
  good_steps_ = good;
}

}  // namespace fjit
