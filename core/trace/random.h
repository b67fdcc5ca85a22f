// Random numbers inside traced code, with explicit keys as in jax.random.
//
// A key is an ordinary traced value of type u32[2]. The same key gives the same bits on any
// machine, with any number of intra-op threads, with thread replicas or MPI ranks: every
// value is a pure function of the key and its position (Philox4x32-10, core/kernels/random/random.cc).
// Keys are never consumed implicitly: derive new ones with split or fold_in, and use each
// key once. Replicas of a pmap get the same stream unless the step folds in its replica
// index: `fold_in(key, axis_index("batch"))`.
#pragma once

#include <cstdint>

#include "core/ir/array.h"
#include "core/trace/ops.h"

namespace fjit {

// The key of a seed, as a constant of the trace (words: low and high 32 bits of the seed).
Tensor PRNGKey(uint64_t seed, Loc loc = Loc::current());
// The same key as a host array, to pass into a step as an argument.
Array prng_key_array(uint64_t seed);

// n new keys, u32[n, 2], independent of each other and of random values drawn from `key`.
Tensor split(const Tensor& key, int64_t n = 2, Loc loc = Loc::current());
// A new key from a key and an i32 or u32 scalar (a step number, a replica index, a layer id).
Tensor fold_in(const Tensor& key, const Tensor& data, Loc loc = Loc::current());
Tensor fold_in(const Tensor& key, uint32_t data, Loc loc = Loc::current());

// Raw u32 bits of `shape`.
Tensor random_bits(const Tensor& key, const Shape& shape, Loc loc = Loc::current());
// Uniform on [minval, maxval): f32 values have 24 random bits, f64 values 32.
Tensor uniform(const Tensor& key, const Shape& shape, DType dtype = DType::f32,
               double minval = 0.0, double maxval = 1.0, Loc loc = Loc::current());
// Standard normal, by the Box-Muller transform of two uniforms (|values| stay below 5.8 in
// f32 and 6.7 in f64).
Tensor normal(const Tensor& key, const Shape& shape, DType dtype = DType::f32,
              Loc loc = Loc::current());
// True with probability p (a bool tensor of `shape`).
Tensor bernoulli(const Tensor& key, double p, const Shape& shape, Loc loc = Loc::current());
// Integers uniform on [minval, maxval) (i32), for ranges up to 2^31.
Tensor randint(const Tensor& key, const Shape& shape, int32_t minval, int32_t maxval,
               Loc loc = Loc::current());
// Samples indices (i32) along `axis` of `logits` with probabilities softmax(logits), one per
// position of the other axes (the result has logits' shape without `axis`). By the Gumbel-max
// trick: the argmax of logits + G, G = -log(-log(U)) with U uniform on (0, 1), drawn and
// added in f64 (32 random bits per element; every G is finite), so a logit of -inf (or any
// value far below the others, e.g. -1e30) is never drawn, unless the whole line is -inf.
// The same key gives the same samples. A -inf logit raises a NaN/Inf check when automatic
// checks are on (mask with a large finite negative value there).
Tensor categorical(const Tensor& key, const Tensor& logits, int axis = -1, Loc loc = Loc::current());
// dropout, a layer drawing from a key, is in core/nn/dropout.h.

}  // namespace fjit
