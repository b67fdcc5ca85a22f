// The mixed-precision policy of the layer library: in which dtype the layers' products run.
//
//   Precision{.compute = DType::f32}   (the default) every product in the activations' dtype;
//   Precision{.compute = DType::bf16}  linear (and mlp, the attention projections, the tied
//                                      LM head), conv2d and their LoRA adapters cast both f32
//                                      operands of each product to bf16 and take the f32
//                                      result (matmul's bf16 products, f32 sums: core/trace/
//                                      ops.h); the fused attention op takes q, k and v cast
//                                      to bf16 (bf16 block products, f32 softmax and sums:
//                                      core/trace/attention.h). Everything else stays f32:
//                                      biases, activations, norms, softmax, losses.
// Parameters stay what they are (f32 master weights): the casts are in the traced program, so
// their gradients are f32 (the cotangent of a bf16 product is an f32 product of bf16 operands,
// core/autodiff/autodiff.cc) and optimizers and their state see nothing new.
//
// The policy is a scope, read while a function is traced: a layer traced inside
// `PrecisionScope s({.compute = DType::bf16});` records bf16 products. It is per thread
// (open it inside the traced function, as the trainers do, so it holds whichever thread traces)
// and nests. A compiled program keeps the policy it was traced with.
#pragma once

#include "core/ir/dtype.h"
#include "core/trace/ops.h"

namespace fjit {

struct Precision {
  DType compute = DType::f32;  // f32 or bf16
};

// The policy in force on this thread (the innermost open scope; the default outside any).
Precision current_precision();

class PrecisionScope {
 public:
  // Throws std::invalid_argument for a compute dtype other than f32 or bf16.
  explicit PrecisionScope(Precision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision saved_;
};

// "f32" or "bf16" to a compute dtype (the trainers' --compute-dtype); false for anything else.
bool compute_dtype_from_name(const std::string& name, DType* out);

// matmul(a, b, trans_a, trans_b) under the policy: with compute bf16 and f32 operands,
// matmul(cast(a, bf16), cast(b, bf16), DType::f32, ...); otherwise the plain product.
Tensor policy_matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
                     Loc loc = Loc::current());

// dot_product_attention(q, k, v, ...) (core/trace/attention.h) under the policy: with compute
// bf16 and f32 q, k and v, the three cast to bf16 (an f32 result, f32 gradients); otherwise the
// plain op.
Tensor policy_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                        const Tensor& key_lengths = Tensor(), double scale = 0, Loc loc = Loc::current());

}  // namespace fjit
