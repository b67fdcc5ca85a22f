// The structural family's entry points: dispatch to the per-file selectors and references.
#include "core/kernels/structural/structural.h"

namespace fjit::kernels {

bool select_structural(Instr& instr) {
  if (instr.op == Op::Cumsum) return st::select_cumsum(instr);
  if (instr.op == Op::TopK) return st::select_top_k(instr);
  switch (op_kind(instr.op)) {
    case OpKind::kMatMul: return st::select_matmul(instr);
    case OpKind::kReduce:
      return instr.op == Op::ArgMax || instr.op == Op::ArgMin ? st::select_argmax(instr)
                                                              : st::select_reduce(instr);
    case OpKind::kLayout:
      if (instr.op == Op::MaxPool || instr.op == Op::MaxPoolGrad) return st::select_max_pool(instr);
      return instr.op == Op::Patches || instr.op == Op::PatchesAdjoint ? st::select_patches(instr)
                                                                       : st::select_layout(instr);
    case OpKind::kIndex:
      return instr.op == Op::SoftmaxXent || instr.op == Op::SoftmaxXentGrad
                 ? st::select_softmax_xent(instr)
                 : st::select_index(instr);
    case OpKind::kCollective: return st::select_collective(instr);
    case OpKind::kRandom: return st::select_random(instr);
    case OpKind::kAttention: return st::select_attention(instr);
    default: return false;
  }
}

bool reference_structural(Op op, const Attrs& attrs, const ValueType& out,
                          std::span<const Array> ins, const RunContext* ctx, Array& result) {
  if (op == Op::Cumsum || op == Op::TopK) return st::reference_cumsum_top_k(op, attrs, ins, result);
  switch (op_kind(op)) {
    case OpKind::kMatMul: case OpKind::kReduce:
      return st::reference_matmul_reduce(op, attrs, out, ins, result);
    case OpKind::kLayout:
      if (op == Op::Patches || op == Op::PatchesAdjoint || op == Op::MaxPool || op == Op::MaxPoolGrad)
        return st::reference_patches(op, attrs, ins, result);
      return st::reference_layout_index(op, attrs, out, ins, ctx, result);
    case OpKind::kIndex:
      if (op == Op::SoftmaxXent || op == Op::SoftmaxXentGrad)
        return st::reference_softmax_xent(op, ins, result);
      return st::reference_layout_index(op, attrs, out, ins, ctx, result);
    case OpKind::kCollective:
      return st::reference_layout_index(op, attrs, out, ins, ctx, result);
    case OpKind::kRandom: return st::reference_random(op, attrs, ins, result);
    case OpKind::kAttention: return st::reference_attention(op, attrs, ins, result);
    default: return false;
  }
}

}  // namespace fjit::kernels
