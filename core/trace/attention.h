// Fused attention: softmax(q k^T * scale + mask) v as one differentiable op.
//
// One op of the table (ir/ops.def: `attention`) computes it blocked, FlashAttention style: the
// scores of one block of queries against one block of keys at a time, with a running (online)
// softmax over the key blocks, so that no [Tq, Tk] score matrix is ever held; scratch memory
// grows with the block, never with Tq * Tk. Its VJP is a second op (`attention_grad`) that
// recomputes each block's probabilities from the row's saved log-sum-exp.
//
// Why the forward's result packs [out | lse]: fjit's ops other than control flow have one
// result, and the backward needs both the output (for rowsum(dout * out)) and each query row's
// log-sum-exp. So `attention` returns [B, H, Tq, dv + 1], the output with the log-sum-exp as
// its last column, and dot_product_attention() returns the slice without it. The backward op
// reads the packed value and its cotangent in place (the slice's VJP pads the cotangent with a
// zero column; a cotangent there would be the log-sum-exp's own and is honoured). Likewise
// `attention_grad` returns dq, dk and dv of each head in one flat [B, H, Tq*dh + Tk*(dh+dv)]
// value, which the VJP rule slices apart. Second derivatives through attention are not
// implemented: differentiating attention_grad is a TraceError, not a silent zero.
//
// Reproducibility: the forward runs a task per (batch, head, query block) and the backward a
// task per (batch, head); inside a task every sum runs in a fixed order of blocks, so the bits
// do not depend on the intra-op thread count (core/base/threads.h).
#pragma once

#include "core/trace/ops.h"

namespace fjit {

// q [B, H, Tq, dh], k [B, H, Tk, dh], v [B, H, Tk, dv] (f32, f64 or bf16, same dtype).
// Returns softmax(q k^T * scale + mask) v : [B, H, Tq, dv], in f32 for bf16 q, k and v: their
//   block products on bf16 operands with f32 sums, the softmax and the output's sums in f32,
//   the probabilities rounded to bf16 for P v (core/kernels/structural/attention_bf16.cc); the
//   gradients of bf16 q, k, v are f32 (the mixed-precision policy's casts carry them back).
// causal: query row i sees key column j only when j <= i + (Tk - Tq) (aligned to the end, so
//   a block of new queries at the end of a longer key sequence works). Causal with Tq > Tk is
//   a TraceError: its first rows could never see a key.
// key_lengths: optional i32 [B]; keys j >= key_lengths[b] are masked (right padding; a KV cache
//   of fixed size Tmax with the valid length as a traced value: decoding one token at a time
//   uses causal=false, key_lengths = pos + 1 and never re-traces).
//   With automatic checks on, a length outside [1, Tk] raises the check kind
//   attention_key_length, naming the batch index (a length of 0 leaves all its query rows with
//   no key). Unchecked, lengths are clamped to [0, Tk], and a query row that sees no key gets
//   zeros (and zero gradients), never NaN.
// scale: 0 means 1/sqrt(dh).
// Shape and dtype errors are TraceErrors naming dot_product_attention, the operands and the
// call site.
Tensor dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                             const Tensor& key_lengths = Tensor(), double scale = 0,
                             Loc loc = Loc::current());

}  // namespace fjit
