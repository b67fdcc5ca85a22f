// The structural family's entry points: dispatch to the per-file selectors and references.
#include "core/kernels/structural.h"

namespace fjit::kernels {

bool select_structural(Instr& instr) {
  switch (op_kind(instr.op)) {
    case OpKind::kMatMul: return st::select_matmul(instr);
    case OpKind::kReduce:
      return instr.op == Op::ArgMax ? st::select_argmax(instr) : st::select_reduce(instr);
    case OpKind::kLayout: return st::select_layout(instr);
    case OpKind::kIndex: return st::select_index(instr);
    case OpKind::kCollective: return st::select_collective(instr);
    default: return false;
  }
}

bool reference_structural(Op op, const Attrs& attrs, const ValueType& out,
                          std::span<const Array> ins, const RunContext* ctx, Array& result) {
  switch (op_kind(op)) {
    case OpKind::kMatMul: case OpKind::kReduce:
      return st::reference_matmul_reduce(op, attrs, out, ins, result);
    case OpKind::kLayout: case OpKind::kIndex: case OpKind::kCollective:
      return st::reference_layout_index(op, attrs, out, ins, ctx, result);
    default: return false;
  }
}

}  // namespace fjit::kernels
