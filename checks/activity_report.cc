#include "checks/activity_report.h"

#include <fmt/format.h>

#include "checks/report.h"
#include "core/base/activity.h"
#include "core/compile/executable.h"
#include "core/trace/stack_trace.h"

namespace fjit {
namespace {

std::string instruction_line(const Executable& exe, int32_t i, bool outer) {
  if (i < 0 || i >= static_cast<int32_t>(exe.instrs.size()))
    return fmt::format("{}starting a plan of {} instructions",
                       outer ? "" : "inside: ", exe.instrs.size());
  const Instr& in = exe.instrs[static_cast<size_t>(i)];
  std::vector<std::string> ins;
  for (const ValueType& t : in.ins) ins.push_back(type_str(t.dtype, t.shape));
  std::string s = fmt::format("{}instruction {} of {}: {} {}{}{}", outer ? "in " : "inside it, ", i,
                              exe.instrs.size(), in.label.empty() ? op_name(in.op) : in.label,
                              type_str(in.out.dtype, in.out.shape), ins.empty() ? "" : " <- ",
                              fmt::join(ins, ", "));
  if (exe.graph && in.node >= 0 && in.node < static_cast<int>(exe.graph->nodes().size())) {
    const Node& n = exe.graph->node(in.node);
    s += fmt::format(", at {}", describe_site(n.site));
    if (op_kind(n.op) == OpKind::kCollective && !n.attrs.name.empty())
      s += fmt::format(" (axis '{}')", n.attrs.name);
    if (n.site.stack) {
      const std::string stack = n.site.stack->to_string(6);
      if (!stack.empty()) s += "\nuser stack:\n" + stack;
    }
  }
  return s;
}

}  // namespace

std::string describe_replica_activity(int replica) {
  const ReplicaActivity* a = replica_activity(replica);
  if (!a) return "";
  std::string out;
  const int depth = a->depth.load(std::memory_order_acquire);
  if (depth == 0) out = "not running a plan (between steps, or in host code)";
  for (int level = 0; level < depth && level < ReplicaActivity::kDepth; ++level) {
    const auto* exe =
        static_cast<const Executable*>(a->plan[level].load(std::memory_order_relaxed));
    if (!exe) continue;
    if (!out.empty()) out += "\n";
    out += instruction_line(*exe, a->instr[level].load(std::memory_order_relaxed), level == 0);
  }
  if (depth > ReplicaActivity::kDepth)
    out += fmt::format("\n(and {} deeper levels)", depth - ReplicaActivity::kDepth);
  const char* collective = a->collective.load(std::memory_order_relaxed);
  const char* axis = a->axis.load(std::memory_order_relaxed);
  if (a->waiting.load(std::memory_order_acquire) && collective)
    out += fmt::format("\nwaiting in {} #{} ({}{} bytes) for the other replicas", collective,
                       a->seq.load(std::memory_order_relaxed),
                       axis ? fmt::format("axis '{}', ", axis) : "",
                       a->bytes.load(std::memory_order_relaxed));
  else if (collective)
    out += fmt::format("\nnot in a collective (the last one entered: {} #{})", collective,
                       a->seq.load(std::memory_order_relaxed));
  else
    out += "\nnot in a collective (none entered yet)";
  return out;
}

}  // namespace fjit
