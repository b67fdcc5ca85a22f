// Results must not depend on the machine: with -march=native GCC would otherwise fuse a*b+c
// into an FMA (one rounding instead of two) wherever the CPU has one.
#pragma GCC optimize("fp-contract=off")

#include "core/lib/initializers.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace fjit {
namespace {

struct Fans {
  double in, out;
};

Fans fans(const Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  double field = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) field *= double(shape[d]);
  return {double(shape[shape.size() - 2]) * field, double(shape.back()) * field};
}

// Fills an array of `dtype` with draw(rng), rounding each double once.
template <class Draw>
Array fill(const Shape& shape, uint64_t seed, DType dtype, Draw draw) {
  if (!is_floating(dtype))
    throw std::invalid_argument(std::string("fjit initializer: dtype must be f32 or f64, got ") + dtype_name(dtype));
  Array a(dtype, shape);
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < a.size(); ++i) {
    const double v = draw(rng);
    if (dtype == DType::f32) a.data<float>()[i] = static_cast<float>(v);
    else a.data<double>()[i] = v;
  }
  return a;
}

Array uniform_limit(const Shape& shape, uint64_t seed, DType dtype, double limit) {
  return fill(shape, seed, dtype, [limit](SplitMix64& r) { return (2.0 * r.uniform() - 1.0) * limit; });
}

Array normal_std(const Shape& shape, uint64_t seed, DType dtype, double stddev) {
  return fill(shape, seed, dtype, [stddev](SplitMix64& r) { return r.normal() * stddev; });
}

}  // namespace

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double SplitMix64::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double f = std::sqrt(-2.0 * portable_log(s) / s);
  spare_ = v * f;
  has_spare_ = true;
  return u * f;
}

double portable_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -HUGE_VAL : std::nan("");
  if (std::isinf(x)) return x;
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  // log m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| < 0.172, so
  // s^2 < 0.0295 and twelve terms reach below double precision.
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double series = 0.0;
  for (int k = 12; k >= 1; --k) series = (series + 1.0 / (2 * k + 1)) * s2;
  const double log_m = 2.0 * s * (1.0 + series);
  // ln 2 split in two so e * ln2_hi is exact for |e| < 2^11.
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return (e * ln2_hi + (e * ln2_lo + log_m));
}

Array glorot_uniform(const Shape& shape, uint64_t seed, DType dtype) {
  const Fans f = fans(shape);
  return uniform_limit(shape, seed, dtype, std::sqrt(6.0 / (f.in + f.out)));
}
Array glorot_normal(const Shape& shape, uint64_t seed, DType dtype) {
  const Fans f = fans(shape);
  return normal_std(shape, seed, dtype, std::sqrt(2.0 / (f.in + f.out)));
}
Array he_uniform(const Shape& shape, uint64_t seed, DType dtype) {
  return uniform_limit(shape, seed, dtype, std::sqrt(6.0 / fans(shape).in));
}
Array he_normal(const Shape& shape, uint64_t seed, DType dtype) {
  return normal_std(shape, seed, dtype, std::sqrt(2.0 / fans(shape).in));
}
Array zeros(const Shape& shape, DType dtype) { return Array::zeros(dtype, shape); }
Array normal_array(const Shape& shape, uint64_t seed, double stddev, DType dtype) {
  return normal_std(shape, seed, dtype, stddev);
}

Array initial_array(Init init, const Shape& shape, uint64_t seed, DType dtype) {
  switch (init) {
    case Init::glorot_uniform: return glorot_uniform(shape, seed, dtype);
    case Init::glorot_normal: return glorot_normal(shape, seed, dtype);
    case Init::he_uniform: return he_uniform(shape, seed, dtype);
    case Init::he_normal: return he_normal(shape, seed, dtype);
  }
  throw std::invalid_argument("initial_array: unknown Init");
}

ArrayDict mlp_params(const std::vector<int64_t>& sizes, uint64_t seed, Init init, DType dtype) {
  if (sizes.size() < 2) throw std::invalid_argument("mlp_params: needs at least {in, out} sizes");
  ArrayDict p;
  for (size_t k = 1; k < sizes.size(); ++k) {
    const Shape w{sizes[k - 1], sizes[k]};
    // One splitmix step separates the layers' streams.
    const uint64_t layer_seed = SplitMix64(seed ^ (0x632be59bd9b4e019ULL * k)).next();
    Array weights = initial_array(init, w, layer_seed, dtype);
    // append() rather than "w" + ...: GCC 12 warns falsely (-Wrestrict) on the latter at -O3.
    const std::string index = std::to_string(k);
    p.set(std::string("w").append(index), weights);
    p.set(std::string("b").append(index), zeros({sizes[k]}, dtype));
  }
  return p;
}

}  // namespace fjit
