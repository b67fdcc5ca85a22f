// Normalization layers as functions of explicit state (parameters and running statistics in,
// new statistics out), for use inside traced step functions. The layers that read a Params
// dict (layer_norm, rms_norm) read it through weight() (core/nn/linear.h): bf16 or f16 gains
// and offsets are cast to x's dtype.
#pragma once

#include <string>

#include "core/ir/array.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// (x - mean) / sqrt(var + eps) * gamma + beta, mean and (biased) variance over the last axis.
// gamma and beta have the last axis's extent.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5,
                  Loc loc = Loc::current());
// The layer: layer_norm(x, p["<name>/g"], p["<name>/b"], eps), a scale "<name>/g" and an
// offset "<name>/b" of the last axis's extent.
Tensor layer_norm(const Params& p, const std::string& name, const Tensor& x, double eps = 1e-5,
                  Loc loc = Loc::current());
// Its parameters, added to `d`: scale ones, offset zeros, both [features].
void layer_norm_params(ArrayDict& d, const std::string& name, int64_t features,
                       DType dtype = DType::f32);

// RMSNorm (Llama's): x * rsqrt(mean(x^2) + eps) * g over the last axis, no centering and no
// offset. Parameter "<name>/g" [features].
Tensor rms_norm(const Params& p, const std::string& name, const Tensor& x, double eps = 1e-6,
                Loc loc = Loc::current());
// Its parameter, added to `d`: the scale, ones [features].
void rms_norm_params(ArrayDict& d, const std::string& name, int64_t features,
                     DType dtype = DType::f32);

struct BatchNormOptions {
  // Training: normalize with the batch's statistics and update the running ones. Evaluation:
  // normalize with the running statistics, which come back unchanged.
  bool training = true;
  // running = momentum * running + (1 - momentum) * batch statistic (flax's convention).
  double momentum = 0.9;
  double eps = 1e-5;
  // Non-empty inside pmap: the batch statistics are over the whole global batch (synchronized
  // batch norm), combined with pmean over this axis, so they do not depend on how the batch
  // is split over replicas, even unevenly.
  std::string axis_name;
};

struct BatchNormResult {
  Tensor y;
  Tensor running_mean;
  Tensor running_var;
};

// Batch normalization of x [..., C] over every axis but the last (so [N, C] and NHWC images):
// y = (x - mean) / sqrt(var + eps) * gamma + beta, with the biased batch variance. gamma,
// beta, running_mean and running_var are [C].
BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& running_mean, const Tensor& running_var,
                           const BatchNormOptions& options = {}, Loc loc = Loc::current());

}  // namespace fjit
