// The structural family's entry points: dispatch to the per-file selectors and references.
#include "core/kernels/structural.h"

namespace fjit::kernels {

bool select_structural(Instr& instr) {
  switch (instr.op) {
    case Op::MatMul: return st::select_matmul(instr);
    case Op::ReduceSum: case Op::ReduceMax: case Op::ReduceMin: case Op::ReduceAll:
    case Op::ReduceAny: return st::select_reduce(instr);
    case Op::ArgMax: return st::select_argmax(instr);
    case Op::Reshape: case Op::Transpose: case Op::BroadcastTo: case Op::Concat:
    case Op::Slice: return st::select_layout(instr);
    case Op::Gather: case Op::ScatterAdd: return st::select_index(instr);
    case Op::AllReduce: case Op::AllGather: case Op::AxisIndex: return st::select_collective(instr);
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
