#include "checks/fpe_report.h"

#include <fmt/format.h>

#include "core/base/fpe_flags.h"

namespace fjit {

std::string fpe_message(const Executable& exe, std::span<const double> values, const Site** where) {
  const auto index = static_cast<size_t>(values[0]);
  if (index >= exe.instrs.size()) return "floating-point exception in an unknown instruction";
  const Instr& in = exe.instrs[index];
  std::string operands;
  for (size_t k = 0; k < in.ins.size(); ++k)
    operands += (k ? ", " : "") + type_str(in.ins[k].dtype, in.ins[k].shape);
  if (exe.graph && in.node >= 0 && in.node < exe.graph->size()) *where = &exe.graph->node(in.node).site;
  return fmt::format(
      "floating-point {} in {} {} (instruction {} of the plan; operands {}): {} non-finite values in "
      "its result, first at flat index {}",
      fpe::flag_names(static_cast<uint32_t>(values[1])), in.label.empty() ? op_name(in.op) : in.label,
      type_str(in.out.dtype, in.out.shape), index, operands.empty() ? "none" : operands,
      static_cast<int64_t>(values[2]), static_cast<int64_t>(values[3]));
}

}  // namespace fjit
