#include "checks/deadline_report.h"

#include <fmt/format.h>

namespace fjit {

std::string deadline_message(const Executable& exe, std::span<const double> values, const Site** where) {
  const double limit = values[0];
  const auto index = static_cast<int64_t>(values[1]);
  if (index < 0 || index >= static_cast<int64_t>(exe.instrs.size()))
    return fmt::format("the step ran past its deadline of {:g} s", limit);
  const Instr& in = exe.instrs[static_cast<size_t>(index)];
  if (exe.graph && in.node >= 0 && in.node < exe.graph->size()) *where = &exe.graph->node(in.node).site;
  std::string nested;
  if (values[3] > 0)
    nested = fmt::format(", at instruction {} of its plan {} level{} down", static_cast<int64_t>(values[2]),
                         static_cast<int64_t>(values[3]), values[3] > 1 ? "s" : "");
  return fmt::format(
      "the step ran past its deadline of {:g} s in {} {} (instruction {} of the plan{}); the rest "
      "of the step ran only its collectives",
      limit, in.label.empty() ? op_name(in.op) : in.label, type_str(in.out.dtype, in.out.shape), index,
      nested);
}

}  // namespace fjit
