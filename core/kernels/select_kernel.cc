#include <stdexcept>
#include <string>

#include "core/kernels/families.h"

namespace fjit {

namespace {
std::string describe(Op op, const ValueType& out, const std::vector<ValueType>& ins) {
  std::string s = std::string(op_name(op)) + " -> " + type_str(out.dtype, out.shape) + " from (";
  for (size_t i = 0; i < ins.size(); ++i)
    s += (i ? ", " : "") + type_str(ins[i].dtype, ins[i].shape);
  return s + ")";
}
}  // namespace

void select_kernel(Instr& instr) {
  bool found = false;
  switch (op_kernel_family(instr.op)) {  // the row's family (core/ir/ops.def)
    case KernelFamily::kElementwiseFamily: found = kernels::select_elementwise(instr); break;
    case KernelFamily::kStructuralFamily: found = kernels::select_structural(instr); break;
    case KernelFamily::kCheckFamily: found = kernels::select_check(instr); break;
    case KernelFamily::kControlFamily:  // lowered by the compiler (core/compile/control_flow.h)
    case KernelFamily::kNoKernel: break;
  }
  if (!found) throw std::logic_error("select_kernel: no kernel for " + describe(instr.op, instr.out, instr.ins));
  if (!instr.fn)
    throw std::logic_error("select_kernel: no function set for " + describe(instr.op, instr.out, instr.ins));
}

Array reference_eval(Op op, const Attrs& attrs, const ValueType& out,
                     std::span<const Array> inputs, const RunContext* ctx) {
  Array result(out.dtype, out.shape);
  const KernelFamily family = op_kernel_family(op);
  if (family == KernelFamily::kElementwiseFamily &&
      kernels::reference_elementwise(op, attrs, out, inputs, result))
    return result;
  if (family == KernelFamily::kStructuralFamily &&
      kernels::reference_structural(op, attrs, out, inputs, ctx, result))
    return result;
  std::vector<ValueType> ins;
  for (const Array& a : inputs) ins.push_back({a.dtype(), a.shape()});
  throw std::logic_error("reference_eval: no reference kernel for " + describe(op, out, ins));
}

}  // namespace fjit
