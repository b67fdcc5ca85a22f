// Dynamic loss scaling (PyTorch's GradScaler, Apex's dynamic scaler) as a host-side policy,
// for training whose gradients are carried in f16.
//
// fjit's f16 is a storage dtype (core/ir/dtype.h): nothing computes in it. The half-precision
// part of a training step is its gradients: the training steps can cast the gradients of the
// scaled loss to f16 before the all-reduce (half the bytes on the wire) and back to f32 after
// (parallel/train/loss_scaling.h). A cast to f16 rounds to 11 significant bits, flushes
// magnitudes below 2^-24 to zero and overflows to inf above 65504; the loss scale moves the
// gradients into that range. bf16 has f32's exponent range, so gradients carried in bf16 need
// no scale: needs_loss_scale(bf16) is false and the policy is not applied for it.
//
// The policy, after every step: an overflow (the step's loss_scale_overflow check raised; the
// step itself was skipped by the skip_step check policy, its state unchanged) multiplies the
// scale by backoff_factor, not below min_scale, and restarts the count of good steps; a good
// step counts one, and growth_interval good steps in a row multiply the scale by
// growth_factor, not above max_scale. A static scale (dynamic = false) never changes. The
// scale is held as an f32 (the step's input): with the default factors every value it takes
// is a power of two, so scaling and unscaling are exact.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/dtype.h"

namespace fjit {

struct LossScaleOptions {
  double init_scale = 32768.0;     // 2^15
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // good steps in a row before the scale grows
  double min_scale = 1.0;
  double max_scale = 16777216.0;   // 2^24
  bool dynamic = true;             // false: the scale stays init_scale
};

// Whether gradients carried in `grad_dtype` need a loss scale: f16 only.
bool needs_loss_scale(DType grad_dtype);

// "--loss-scale": "dynamic" (the defaults above) or a positive finite number N (a static scale
// N). False for anything else.
bool parse_loss_scale(const std::string& text, LossScaleOptions* out);

class DynamicLossScale {
 public:
  // Throws std::invalid_argument naming the bad field: scales not positive and finite,
  // init outside [min, max], growth_factor <= 1, backoff_factor outside (0, 1),
  // growth_interval < 1, or a scale that f32 cannot hold.
  explicit DynamicLossScale(LossScaleOptions options = {});

  // The scale the next step multiplies its loss by (an f32 value).
  float scale() const { return scale_; }
  // Good steps since the scale last changed.
  int64_t good_steps() const { return good_steps_; }
  const LossScaleOptions& options() const { return options_; }

  // Applies the policy after a step: `overflow` when its loss_scale_overflow check raised,
  // `skipped` when the check policy skipped it for any reason. A step skipped for another
  // reason than an overflow neither counts as good nor changes the scale. Returns true when
  // the scale changed.
  bool update(bool overflow, bool skipped);
  // Sets the scale as given (any positive f32 value: the policy's clamping to [min_scale,
  // max_scale] applies to its own moves only) and restarts the count.
  void set_scale(double scale);

  // Where the policy stands ("<scale> <good steps>", the scale printed to round-trip exactly),
  // for checkpoints, and its inverse (std::invalid_argument for text it did not write).
  std::string state() const;
  void set_state(const std::string& state);

 private:
  LossScaleOptions options_;
  float scale_ = 1.0f;
  int64_t good_steps_ = 0;
};

}  // namespace fjit
