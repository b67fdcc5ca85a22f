// Host-side parameter initializers from an explicit seed.
//
// Deterministic across runs, compilers and machines: a splitmix64 stream, uniform doubles from
// its top 53 bits, normals by the Marsaglia polar method with fjit's own logarithm (only
// +, -, *, / and sqrt, which IEEE 754 rounds exactly, compiled without FMA contraction), so
// no result depends on std:: distributions or on the C library's log. Values are computed in
// double and rounded once to the requested dtype.
//
// Fans: a weight of shape [in, out] (the layout matmul(x, w) uses) has fan_in = in and
// fan_out = out; for rank > 2 the leading dimensions multiply both (a receptive field); a
// rank-1 shape has fan_in = fan_out = its extent.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/array.h"
#include "core/trace/dict.h"

namespace fjit {

// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed 64-bit generator.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Standard normal.
  double normal();

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// Natural logarithm of x > 0 from basic arithmetic only (see above); exact to ~1 ulp.
double portable_log(double x);

// U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)).
Array glorot_uniform(const Shape& shape, uint64_t seed, DType dtype = DType::f32);
// N(0, 2 / (fan_in + fan_out)) (not truncated).
Array glorot_normal(const Shape& shape, uint64_t seed, DType dtype = DType::f32);
// U(-limit, limit), limit = sqrt(6 / fan_in): for relu layers.
Array he_uniform(const Shape& shape, uint64_t seed, DType dtype = DType::f32);
// N(0, 2 / fan_in) (not truncated).
Array he_normal(const Shape& shape, uint64_t seed, DType dtype = DType::f32);
Array zeros(const Shape& shape, DType dtype = DType::f32);
// N(0, stddev^2) (not truncated): embedding tables and other weights without fans.
Array normal_array(const Shape& shape, uint64_t seed, double stddev, DType dtype = DType::f32);

enum class Init { glorot_uniform, glorot_normal, he_uniform, he_normal };

// An array of `shape` drawn with `init` (the function of that name above).
Array initial_array(Init init, const Shape& shape, uint64_t seed, DType dtype = DType::f32);

// Parameters of an MLP with layer sizes {in, h1, ..., out}: "w1" [in, h1], "b1" [h1], "w2",
// "b2", ... in that order; weights drawn with `init`, biases zero. Layer k's weights use a
// seed derived from (seed, k), so adding a layer does not change the others.
ArrayDict mlp_params(const std::vector<int64_t>& sizes, uint64_t seed, Init init = Init::he_normal,
                     DType dtype = DType::f32);

}  // namespace fjit
