// The all-reduce update (fused.h, select_reduce_update): out = addend + alpha * psum(g), the
// SGD step on a data-parallel gradient, as one collective (Communicator::all_reduce_apply).
//
// Unfused, a replica reduces its gradient (the thread backend writes each reduced chunk into
// every replica's buffer), then reads the whole reduced gradient back for the update: in a
// 784x512 layer that is two more passes over 1.6 MB, half of them over memory another core
// just wrote. Fused, whichever replica reduces a block applies the update for every replica
// while the block is in its cache, and the reduced gradient is written nowhere unless
// something else reads it.
//
// Rounding: out = fma(alpha, s, addend), s the all-reduce's sum (rank order); so every
// replica gets the same bits whichever replica computed the block, and a step gives the same
// parameters whatever the check mode (the group is formed on result consumers only).
#include <cstring>

#include "core/kernels/gemm/affine_update.h"
#include "core/kernels/fused/fused.h"
#include "core/kernels/collective/communicator.h"

namespace fjit {
namespace {

// p[0] = elements, p[1] = N (row length, for a row-vector addend), p[6] = AddendForm
// (affine_update.h), p[7] bit 0: the reduced
// value is written too (buffer in_bufs[ins.size()]).
struct ApplyCtx {
  const Instr* in;
  Frame frame;
};

template <class T>
void apply_block(void* ctx, int64_t begin, int64_t count, const void* values) {
  const ApplyCtx& c = *static_cast<const ApplyCtx*>(ctx);
  const Instr& in = *c.in;
  const T* s = static_cast<const T*>(values);
  const T* addend = in.p[6] == kNoAddend ? nullptr : in.in<T>(c.frame, 1);
  affine_update<T>(static_cast<T>(in.attrs.scalar), s, addend, in.p[6], in.p[1], begin,
                   in.output<T>(c.frame) + begin, count);
  if (in.p[7] & 1) {
    T* reduced = static_cast<T*>(c.frame.bufs[in.in_bufs[in.ins.size()]]) + begin;
    if (reduced != s) std::memcpy(reduced, s, count * sizeof(T));
  }
}

template <class T>
void reduce_update_kernel(const Instr& in, const Frame& f) {
  ApplyCtx ctx{&in, f};
  const T* g = in.in<T>(f, 0);
  const int64_t n = in.p[0];
  if (!f.ctx || !f.ctx->comm) {  // outside pmap: a group of one, whose sum is g itself
    apply_block<T>(&ctx, 0, n, g);
    return;
  }
  // Where a backend needs the reduced values whole (MPI): the reduced buffer when there is
  // one, else the output, which the update then rewrites element by element.
  void* scratch = (in.p[7] & 1) ? f.bufs[in.in_bufs[in.ins.size()]] : in.output<void>(f);
  f.ctx->comm->for_axis(in.attrs.name)->all_reduce_apply(g, scratch, n, in.out.dtype, &ctx, apply_block<T>);
}

}  // namespace

bool select_reduce_update(Instr& instr, bool with_reduced) {
  instr.fn = nullptr;
  const DType t = instr.out.dtype;
  if ((t != DType::f32 && t != DType::f64) || instr.out.size() == 0) return false;
  if (instr.ins.empty() || instr.ins.size() > 2) return false;
  for (const ValueType& v : instr.ins)
    if (v.dtype != t) return false;
  if (instr.ins[0].shape != instr.out.shape) return false;
  const int64_t n = instr.out.shape.empty() ? 1 : instr.out.shape.back();
  instr.p[0] = instr.out.size();
  instr.p[1] = n;
  if (!addend_form(instr.out.shape, instr.ins.size() == 2 ? &instr.ins[1] : nullptr, &instr.p[6]))
    return false;
  instr.p[7] = with_reduced ? 1 : 0;
  instr.fn = t == DType::f32 ? reduce_update_kernel<float> : reduce_update_kernel<double>;
  return true;
}

}  // namespace fjit
