// Fused attention's kernel geometry (core/trace/attention.h), shared by the f32/f64 kernels
// (attention.cc) and the bf16-operand kernels (attention_bf16.cc): the sizes, the causal flag,
// the key lengths' operand, and which keys each query row sees.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/kernels/kernel.h"

namespace fjit::kernels::st {

// p: [0] B, [1] H, [2] Tq, [3] Tk, [4] dh, [5] dv, [6] causal, [7] the key lengths' operand
// (-1: none).
struct AttentionGeometry {
  int64_t b, h, tq, tk, dh, dv, lengths_operand;
  bool causal;
  explicit AttentionGeometry(const Instr& in)
      : b(in.p[0]), h(in.p[1]), tq(in.p[2]), tk(in.p[3]), dh(in.p[4]), dv(in.p[5]),
        lengths_operand(in.p[7]), causal(in.p[6] != 0) {}
  static void fill(Instr& in) {
    const Shape& q = in.ins[0].shape;
    const size_t base = in.op == Op::Attention ? 3 : 5;
    const int64_t p[8] = {q[0], q[1], q[2], in.ins[1].shape[2], q[3], in.ins[2].shape[3],
                          in.attrs.index != 0, in.ins.size() > base ? static_cast<int64_t>(base) : -1};
    std::copy(p, p + 8, in.p);
  }
  // Batch index b's key length, clamped to [0, Tk].
  int64_t key_length(const Instr& in, const Frame& f, int64_t bi) const {
    if (lengths_operand < 0) return tk;
    return std::clamp<int64_t>(in.in<int32_t>(f, static_cast<int>(lengths_operand))[bi], 0, tk);
  }
  // How many keys query row i sees (the first ones): 0 for none.
  int64_t row_length(int64_t length, int64_t i) const {
    return causal ? std::min(length, i + tk - tq + 1) : length;
  }
};

// The attention and attention_grad kernels on bf16 q, k and v with f32 results
// (attention_bf16.cc).
void attention_bf16_kernel(const Instr& in, const Frame& f);

}  // namespace fjit::kernels::st
