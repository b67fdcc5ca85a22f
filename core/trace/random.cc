// Builders for random numbers (see core/trace/random.h).
#include "core/trace/random.h"

#include <cmath>

namespace fjit {
namespace {

ValueType shape_hint(DType t, const Shape& s) { return {t, s}; }

void require_key(const char* name, const Tensor& key, const Loc& loc) {
  if (!key.defined()) detail::fail(name, {}, "the key is an undefined Tensor", &loc);
  if (key.dtype() != DType::u32 || key.shape() != Shape{2})
    detail::fail(name, {key}, "expects a key of type u32[2] (from PRNGKey, split or fold_in), got " +
                 key.type_string(), &loc);
}

Tensor bits_of(const char* name, const Tensor& key, const Shape& shape, int64_t domain,
               const Loc& loc) {
  require_key(name, key, loc);
  Attrs a;
  a.index = domain;
  return detail::build(name, Op::RandomBits, {key}, std::move(a), shape_hint(DType::u32, shape),
                       &loc);
}

Tensor unit(const char* name, const Tensor& bits, DType dtype, const Loc& loc) {
  if (!is_floating(dtype))
    detail::fail(name, {bits}, std::string("expects a floating-point dtype, got ") +
                 dtype_name(dtype), &loc);
  return detail::build(name, Op::RandomUnit, {bits}, Attrs{}, shape_hint(dtype, {}), &loc);
}

}  // namespace

Array prng_key_array(uint64_t seed) {
  const uint32_t words[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return Array::from_data(words, Shape{2});
}

Tensor PRNGKey(uint64_t seed, Loc loc) { return constant(prng_key_array(seed), loc); }

Tensor split(const Tensor& key, int64_t n, Loc loc) {
  if (n < 0) detail::fail("split", {key}, "n must be >= 0, got " + std::to_string(n), &loc);
  return bits_of("split", key, {n, 2}, 1, loc);
}

Tensor fold_in(const Tensor& key, const Tensor& data, Loc loc) {
  require_key("fold_in", key, loc);
  return detail::build("fold_in", Op::FoldIn, {key, data}, Attrs{}, shape_hint(DType::u32, {}),
                       &loc);
}

Tensor fold_in(const Tensor& key, uint32_t data, Loc loc) {
  return fold_in(key, constant(Array::scalar(data), loc), loc);
}

Tensor random_bits(const Tensor& key, const Shape& shape, Loc loc) {
  return bits_of("random_bits", key, shape, 0, loc);
}

Tensor uniform(const Tensor& key, const Shape& shape, DType dtype, double minval, double maxval,
               Loc loc) {
  detail::CompositeScope scope("uniform", {key});
  Tensor u = unit("uniform", bits_of("uniform", key, shape, 0, loc), dtype, loc);
  if (minval == 0.0 && maxval == 1.0) return u;
  return add(mul(u, scalar(dtype, maxval - minval, loc), loc), scalar(dtype, minval, loc), loc);
}

Tensor normal(const Tensor& key, const Shape& shape, DType dtype, Loc loc) {
  detail::CompositeScope scope("normal", {key});
  Shape two = shape;
  two.insert(two.begin(), 2);
  Tensor u = unit("normal", bits_of("normal", key, two, 0, loc), dtype, loc);
  const int64_t rank = static_cast<int64_t>(two.size());
  Axes lo(rank, 0), hi(two.begin(), two.end());
  hi[0] = 1;
  Tensor u1 = reshape(slice(u, lo, hi, {}, loc), shape, loc);
  lo[0] = 1;
  hi[0] = 2;
  Tensor u2 = reshape(slice(u, lo, hi, {}, loc), shape, loc);
  // 1 - u1 is in (0, 1]: the logarithm is finite.
  Tensor radius = sqrt(mul(log(sub(scalar(dtype, 1.0, loc), u1, loc), loc),
                           scalar(dtype, -2.0, loc), loc), loc);
  return mul(radius, cos(mul(u2, scalar(dtype, 2.0 * M_PI, loc), loc), loc), loc);
}

Tensor bernoulli(const Tensor& key, double p, const Shape& shape, Loc loc) {
  detail::CompositeScope scope("bernoulli", {key});
  if (!(p >= 0.0 && p <= 1.0))
    detail::fail("bernoulli", {key}, "p must be in [0, 1], got " + std::to_string(p), &loc);
  Tensor u = unit("bernoulli", bits_of("bernoulli", key, shape, 0, loc), DType::f64, loc);
  return lt(u, scalar(DType::f64, p, loc), loc);
}

Tensor randint(const Tensor& key, const Shape& shape, int32_t minval, int32_t maxval, Loc loc) {
  detail::CompositeScope scope("randint", {key});
  if (maxval <= minval)
    detail::fail("randint", {key}, "needs minval < maxval, got [" + std::to_string(minval) + ", " +
                 std::to_string(maxval) + ")", &loc);
  Tensor u = unit("randint", bits_of("randint", key, shape, 0, loc), DType::f64, loc);
  const double range = static_cast<double>(maxval) - static_cast<double>(minval);
  if (range > 2147483648.0)
    detail::fail("randint", {key}, "supports ranges of at most 2^31 values", &loc);
  // floor(u * range) < range since u < 1; the cast truncates (the value is >= 0).
  Tensor offset = cast(mul(u, scalar(DType::f64, range, loc), loc), DType::i32, loc);
  return add(offset, scalar(DType::i32, minval, loc), loc);
}

}  // namespace fjit

namespace fjit {

Tensor categorical(const Tensor& key, const Tensor& logits, int axis, Loc loc) {
  require_key("categorical", key, loc);
  if (!logits.defined()) detail::fail("categorical", {key}, "the logits are an undefined Tensor", &loc);
  if (!is_floating(logits.dtype()) || logits.rank() == 0)
    detail::fail("categorical", {key, logits}, "expects floating-point logits of rank >= 1, got " +
                 logits.type_string(), &loc);
  if (axis < -logits.rank() || axis >= logits.rank())
    detail::fail("categorical", {key, logits}, "axis " + std::to_string(axis) + " is out of range for " +
                 logits.type_string(), &loc);
  detail::CompositeScope scope("categorical", {key, logits});
  const Shape shape = logits.shape();  // a copy: building ops grows the node list
  // U = u + 2^-33 with u on the grid k * 2^-32, k < 2^32: U is in (0, 1) and exact in f64.
  Tensor u = add(unit("categorical", bits_of("categorical", key, shape, 0, loc), DType::f64, loc),
                 scalar(DType::f64, std::ldexp(1.0, -33), loc), loc);
  Tensor gumbel = neg(log(neg(log(u, loc), loc), loc), loc);
  Tensor z = add(cast(logits, DType::f64, loc), gumbel, loc);
  return argmax(z, axis, false, loc);
}

}  // namespace fjit
