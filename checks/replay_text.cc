// The replay's text (format_replay, checks/replay_search.h).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checks/replay_search.h"

namespace fjit {
namespace {

constexpr size_t kReportLines = 16;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

std::string format_replay(const ReplayResult& r) {
  const ReplayBundle& b = r.bundle;
  std::string s =
      r.replicas_replayed > 1
          ? fmt::format("fjit replay of {}: '{}' at step {}, all {} replicas together (thread replicas), every "
                        "automatic check on\n", b.dir, b.function, b.step, r.replicas_replayed)
          : fmt::format("fjit replay of {}: '{}' at step {}, replica {} of {}{}, every automatic check on\n",
                        b.dir, b.function, b.step, b.replica, b.num_replicas, b.num_replicas > 1 ? " alone" : "");
  if (!r.note.empty()) s += fmt::format("  {}\n", r.note);
  if (r.outputs_compared)
    s += r.output_mismatches.empty()
             ? "  replayed as it ran: every replica's outputs are bit-identical to those it recorded\n"
             : fmt::format("  NOT replayed as it ran: these outputs differ from those recorded: {}\n",
                           fmt::join(r.output_mismatches, ", "));
  if (r.check_report.empty())
    s += r.replicas_replayed > 1 || b.num_replicas == 1
             ? "  the replayed step raised no check\n"
             : "  the replayed step raised no check (a collective's value, which the replay takes from this "
               "replica alone, or another replica's data made the step fail)\n";
  else {
    // The report lists every raised check; its head (the first raised, the root causes) is
    // what matters here. ReplayResult::check_report has all of it.
    std::vector<std::string> lines = split_lines(r.check_report);
    const size_t total = lines.size();
    if (total > kReportLines) lines.resize(kReportLines);
    s += fmt::format("  the replayed step's report{}:\n    {}\n",
                     total > kReportLines ? fmt::format(" (its first {} of {} lines)", kReportLines, total) : "",
                     fmt::join(lines, "\n    "));
  }
  if (!r.bad_input.empty())
    s += fmt::format("  the non-finite values come with the input '{}': {}\n", r.bad_input, r.bad_input_note);
  if (!r.found) {
    if (r.bad_input.empty())
      s += fmt::format("  no op produced a non-finite or out-of-range value from valid operands{}{}\n",
                       r.problem.empty() ? "" : "; ", r.problem);
    return s;
  }
  s += fmt::format("  first bad op in plan order: {} {} at {}{}{}\n    {}\n", r.op, r.type, r.site,
                   r.inside.empty() ? "" : ", in " + r.inside,
                   r.replicas_replayed > 1 ? fmt::format(", on replica {}", r.replica) : "", r.problem);
  for (const std::string& line : r.operands) s += fmt::format("    {}\n", line);
  if (r.after_collective && r.replicas_replayed == 1 && b.num_replicas > 1)
    s += "    (downstream of a collective: the replay used this replica's own value for it)\n";
  if (!r.stack.empty())
    s += fmt::format("    stack at trace time:\n      {}\n", fmt::join(split_lines(r.stack), "\n      "));
  return s;
}

}  // namespace fjit
