// Internal: the structural kernel family (matmul, reductions, argmax, top_k, layout, cumsum,
// indexing, collectives, fused attention), split by file. select_structural() and reference_structural() in
// structural.cc dispatch to the functions below; each returns false for ops it does not own.
//
// Fast kernels precompute everything in select (sizes in Instr::p, shapes and strides in
// Instr::v) so that at run time they only read those, never allocate, lock or throw.
// Unless documented otherwise, a fast kernel requires its output buffer not to alias an
// input (the memory planner only runs elementwise ops in place); Reshape and AllReduce
// tolerate out == in.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/kernels/families.h"

namespace fjit::kernels::st {

// Fast paths (matmul.cc, reduce.cc, reduce_argmax.cc, layout.cc, structural_index.cc,
// structural_collective.cc).
bool select_matmul(Instr& instr);
bool select_reduce(Instr& instr);
bool select_argmax(Instr& instr);
bool select_layout(Instr& instr);
bool select_index(Instr& instr);
bool select_collective(Instr& instr);
bool select_patches(Instr& instr);   // patches.cc
bool select_max_pool(Instr& instr);  // pooling.cc
bool select_random(Instr& instr);    // random.cc
bool select_attention(Instr& instr); // attention.cc
bool select_cumsum(Instr& instr);    // cumsum_top_k.cc
bool select_top_k(Instr& instr);     // cumsum_top_k.cc
bool select_softmax_xent(Instr& instr);  // softmax_xent.cc

// The most dimensions a fast kernel walks with an on-stack odometer after merging
// contiguous dimensions; select throws std::logic_error beyond it.
inline constexpr int kMaxKernelRank = 32;

// Unsigned integer of the given byte size: layout and gather kernels move bits, not values.
template <int Bytes> struct Word;
template <> struct Word<1> { using type = uint8_t; };
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint64_t; };

// Picks Fn<uint8_t/uint32_t/uint64_t> by element size.
template <template <class> class Fn>
KernelFn by_element_size(DType t) {
  switch (dtype_size(t)) {
    case 1: return Fn<uint8_t>::run;
    case 2: return Fn<uint16_t>::run;
    case 4: return Fn<uint32_t>::run;
    case 8: return Fn<uint64_t>::run;
  }
  return nullptr;
}

// Reference kernels (reference_structural.cc, reference_structural_layout.cc): plain loops
// over Arrays that share no code with the fast paths. `result` is pre-sized and zeroed.
bool reference_matmul_reduce(Op op, const Attrs& attrs, const ValueType& out,
                             std::span<const Array> ins, Array& result);
bool reference_layout_index(Op op, const Attrs& attrs, const ValueType& out,
                            std::span<const Array> ins, const RunContext* ctx, Array& result);
// reference_patches.cc: patches, patches_adjoint, max_pool and max_pool_grad.
bool reference_patches(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result);
bool reference_random(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result);
bool reference_attention(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result);
bool reference_cumsum_top_k(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result);
// reference_softmax_xent.cc: softmax_xent and softmax_xent_grad.
bool reference_softmax_xent(Op op, std::span<const Array> ins, Array& result);

}  // namespace fjit::kernels::st
