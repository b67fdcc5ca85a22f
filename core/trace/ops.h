// The traced op API. Each function checks its operands, records a node, and returns a handle.
// Axes may be negative (counted from the end). Binary ops broadcast NumPy style and require
// equal dtypes; a C++ scalar operand takes the tensor's dtype (JAX's weak typing).
// Every function takes the caller's source location for error messages and check reports.
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "core/trace/tensor.h"

namespace fjit {

using Axes = std::vector<int64_t>;

// Sources.
Tensor full(DType dtype, const Shape& shape, double value, Loc loc = Loc::current());
Tensor scalar(DType dtype, double value, Loc loc = Loc::current());
Tensor zeros_like(const Tensor& x, Loc loc = Loc::current());
Tensor ones_like(const Tensor& x, Loc loc = Loc::current());
Tensor constant(const Array& value, Loc loc = Loc::current());
// Values 0..n-1 along `axis` of `shape`.
Tensor iota(DType dtype, const Shape& shape, int64_t axis = 0, Loc loc = Loc::current());

// Unary: one builder per row of core/ir/ops.def whose builder column is unary(fn) — neg, abs,
// exp, log, log1p, sqrt, rsqrt, tanh, sigmoid, relu, sign, isfinite, logical_not, ...
#define FJIT_BUILDER_custom
#define FJIT_BUILDER_unary(fn) Tensor fn(const Tensor& x, Loc loc = Loc::current());
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, finite, input_check, family, builder, batch) \
  FJIT_BUILDER_##builder
#include "core/ir/ops.def"
#undef FJIT_OP
#undef FJIT_BUILDER_unary
#undef FJIT_BUILDER_custom
Tensor cast(const Tensor& x, DType dtype, Loc loc = Loc::current());
Tensor square(const Tensor& x, Loc loc = Loc::current());
// The ops gelu and gelu_grad: x * Phi(x) and its derivative Phi(x) + x phi(x), Phi the normal
// CDF (erf) and phi its density (nn's gelu is the first; see core/nn/activations.h).
Tensor gelu_exact(const Tensor& x, Loc loc = Loc::current());
Tensor gelu_exact_grad(const Tensor& x, Loc loc = Loc::current());

// Binary (broadcasting).
Tensor add(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor sub(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor mul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor div(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor pow(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor maximum(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor minimum(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor eq(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor ne(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor lt(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor le(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor gt(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor ge(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor logical_and(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor logical_or(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// Elementwise cond ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc = Loc::current());

// Operators (no source location: errors find the call site on the stack).
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);

// Linear algebra. a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K]
// with trans_b); a rank-2 operand broadcasts over the other's batch dimensions. f16 and bf16
// operands (both of one dtype) are multiplied in f32 and the result rounded once to theirs.
// bf16 operands run on bf16 products (the matmul op on two bf16 operands has an f32 result:
// exact products, f32 sums; AVX512_BF16 dot products where the CPU has them).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              Loc loc = Loc::current());
// The same product with the result's dtype given, as JAX's preferred_element_type: f32 for
// bf16 or f16 operands (the f32 accumulator, not rounded back), or the operands' own dtype
// (as above). Any other `result` is a TraceError. Its VJP gives f32 cotangents for bf16
// operands (a bf16 value's cotangent is carried in f32: core/autodiff/autodiff.cc).
Tensor matmul(const Tensor& a, const Tensor& b, DType result, bool trans_a = false,
              bool trans_b = false, Loc loc = Loc::current());

// Reductions. Empty `axes` reduces over every axis. sum, mean, max and min of f16 and bf16
// accumulate in f32 and round the result once. Over zero elements (a zero-row batch) sum and
// mean are 0 (mean is sum / max(count, 1), so a replica that joined with no data contributes
// 0, never NaN, to a pmean whose weight for it is 0).
Tensor sum(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor mean(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor max(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor min(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor all(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor any(const Tensor& x, Axes axes = {}, bool keepdims = false, Loc loc = Loc::current());
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false, Loc loc = Loc::current());
// The first index of the smallest element along `axis` (i32); NaN counts as the smallest.
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims = false, Loc loc = Loc::current());

// Inclusive cumulative sum along `axis` (from the end of the axis when `reverse`), summed in
// order, so its bits do not depend on the thread count; f16 and bf16 accumulate in f32.
// Differentiable: the VJP is the cumsum of the cotangent in the other direction.
Tensor cumsum(const Tensor& x, int axis, bool reverse = false, Loc loc = Loc::current());
// The k largest elements along the last axis, in descending order, and their indices (i32);
// of equal elements the lower index comes first, and NaN counts as larger than any number.
// values [..., k] is a gather of x by the indices, so it is differentiable (the cotangent
// goes to the chosen elements); the indices are not. 0 <= k <= the last extent.
std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k, Loc loc = Loc::current());

// Layout. reshape accepts one -1 extent.
Tensor reshape(const Tensor& x, Shape shape, Loc loc = Loc::current());
// Empty perm reverses the axes.
Tensor transpose(const Tensor& x, Axes perm = {}, Loc loc = Loc::current());
Tensor broadcast_to(const Tensor& x, const Shape& shape, Loc loc = Loc::current());
Tensor expand_dims(const Tensor& x, int64_t axis, Loc loc = Loc::current());
// Empty axes removes every extent-1 axis.
Tensor squeeze(const Tensor& x, Axes axes = {}, Loc loc = Loc::current());
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, Loc loc = Loc::current());
// Per-dimension [start, limit) with step; empty steps means 1. Negative starts/limits count
// from the end.
Tensor slice(const Tensor& x, Axes starts, Axes limits, Axes steps = {}, Loc loc = Loc::current());
// x[..., indices[j...], ...] along `axis`; out-of-range indices are clamped (an automatic
// check reports them when checks are on).
Tensor take(const Tensor& x, const Tensor& indices, int64_t axis = 0, Loc loc = Loc::current());
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis = 0, Loc loc = Loc::current());
// The adjoint of take: zeros of `operand_shape` with `updates` added at `indices`.
Tensor scatter_add(const Tensor& updates, const Tensor& indices, const Shape& operand_shape,
                   int64_t axis = 0, Loc loc = Loc::current());
Tensor one_hot(const Tensor& labels, int64_t depth, DType dtype = DType::f32,
               Loc loc = Loc::current());
// The cross entropy logsumexp(logits) - logits[label] of f32 or f64 logits [..., V] against
// i32 labels [...], per row in one streaming pass: result [...]. A label outside [0, V) scores
// 0 (and gets a zero gradient); the automatic check label_out_of_range reports it, naming the
// flat row index and the label. Its gradient is the op softmax_xent_grad, (softmax - onehot) *
// ct, the only [..., V] buffer of the backward pass. The layer is softmax_cross_entropy
// (core/nn/losses.h).
Tensor softmax_xent(const Tensor& logits, const Tensor& labels, Loc loc = Loc::current());

// softmax, log_softmax, softmax_cross_entropy and the other layers built from these ops are
// in core/nn/.

}  // namespace fjit
