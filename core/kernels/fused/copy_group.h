// Copy groups: a chain of layout ops (slices, reshapes, transposes, a concat) with maybe one
// f32 -> bf16 cast, or a `+ 0` over the whole, run as one pass over memory (the fusion
// planner's kCopy groups, core/compile/fusion/fusion.h).
//
// The instruction writes its contiguous row-major result from pieces. A piece copies a strided
// view of one operand into a strided region of the result:
//   out[dst_base + sum_k i_k * dst_k + j] = convert(in[src_base + sum_k i_k * src_k + j])
// for every index i < ext and j < run: each position i moves one run of `run` elements that
// are contiguous in the operand and in the result. The pieces' regions are disjoint and cover
// the result. convert is the identity, the cast kernel's f32 -> bf16 rounding
// (core/kernels/elementwise/cast_bf16.h), or x + 0 in f32 (the add's own arithmetic), so each
// element has the bits the unfused ops give it, on any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/kernel.h"

namespace fjit {

struct CopyPiece {
  enum Convert : uint8_t { kSame, kToBf16, kPlusZero };
  int operand = 0;  // index into instr.ins
  Convert convert = kSame;
  int64_t src_base = 0, dst_base = 0;  // in elements of the operand and of the result
  std::vector<int64_t> ext, src, dst;  // the positions, outermost first
  int64_t run = 0;
};

// Prepares instr (ins and out set) to run `pieces`. False when some piece is outside its
// operand or the result, converts between dtypes it cannot, or the pieces do not cover the
// result exactly once.
bool select_copy_group(Instr& instr, std::vector<CopyPiece> pieces);

}  // namespace fjit
