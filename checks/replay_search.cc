// The first bad op: a forward walk over the compiled graph with the reference kernels, each
// value kept until its last reader has run.
#include "checks/replay_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "checks/report.h"
#include "core/ir/check_kind.h"
#include "core/trace/stack_trace.h"

namespace fjit {
namespace {

constexpr size_t kReportLines = 16;

bool may_be_non_finite(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

struct Scan {
  int64_t nan = 0, inf = 0, first = -1;
};

Scan scan_non_finite(const Array& a) {
  Scan s;
  if (!may_be_non_finite(a.dtype())) return s;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double v = a.at_as_double(i);
    if (std::isfinite(v)) continue;
    (std::isnan(v) ? s.nan : s.inf) += 1;
    if (s.first < 0) s.first = i;
  }
  return s;
}

std::vector<int64_t> multi_index(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx;
}

std::string index_str(const std::vector<int64_t>& idx) {
  std::string s = fmt::format("[{}]", fmt::join(idx, ", "));
  if (!idx.empty()) s += fmt::format(" (row {})", idx[0]);
  return s;
}

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

std::string value_str(double v) { return fmt::format("{:.6g}", v); }

// Where a value comes from: an input leaf, or an op and its call site.
std::string origin(const Graph& g, int id, const ReplayBundle& b) {
  const Node& n = g.node(id);
  if (n.op == Op::Parameter) {
    const auto k = static_cast<size_t>(n.attrs.index);
    return fmt::format("input '{}'", k < b.inputs.size() ? b.inputs[k].first : n.attrs.name);
  }
  if (n.op == Op::Constant) return "a constant";
  return fmt::format("%{} {} at {}", id, op_name(n.op), describe_site(n.site));
}

// One operand's line: origin, type, range, bad counts, and its value(s) at the offending
// element `at` of the result's (or index operand's) index space `space`.
std::string operand_line(int k, const Graph& g, int id, const Array& v, const Shape& space,
                         int64_t at, const ReplayBundle& b) {
  std::string s = fmt::format("operand {}: {} {}", k, origin(g, id, b), type_str(v.dtype(), v.shape()));
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < v.size(); ++i) {
    const double x = v.at_as_double(i);
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  }
  if (lo <= hi) s += fmt::format(", finite values in [{}, {}]", value_str(lo), value_str(hi));
  const Scan bad = scan_non_finite(v);
  if (bad.nan + bad.inf > 0) s += fmt::format(", {} NaN and {} Inf values", bad.nan, bad.inf);
  if (at < 0) return s;
  const std::vector<int64_t> idx = multi_index(space, at);
  if (v.shape() == space) {
    s += fmt::format("; at {}: {}", index_str(idx), value_str(v.at_as_double(at)));
  } else if (v.size() == 1) {
    s += fmt::format("; value {}", value_str(v.at_as_double(0)));
  } else if (!v.shape().empty() && !idx.empty() && v.shape()[0] == space[0]) {
    const int64_t row = idx[0], width = v.size() / v.shape()[0];
    std::vector<std::string> vals;
    for (int64_t j = 0; j < std::min<int64_t>(width, 8); ++j) vals.push_back(value_str(v.at_as_double(row * width + j)));
    s += fmt::format("; row {}: [{}{}]", row, fmt::join(vals, ", "), width > 8 ? ", ..." : "");
  }
  return s;
}

void describe_op(const Graph& g, int id, ReplayResult& r) {
  const Node& n = g.node(id);
  r.found = true;
  r.op = op_name(n.op);
  r.type = type_str(n.dtype, n.shape);
  r.site = describe_site(n.site);
  if (n.site.stack) r.stack = n.site.stack->to_string(8);
}

}  // namespace

void search_first_bad_op(const Executable& exe, const ReplayBundle& b, ReplayResult& r) {
  const Graph& g = *exe.graph;
  const int count = static_cast<int>(g.nodes().size());
  std::vector<int> last_use(count, -1);
  for (int i = 0; i < count; ++i)
    for (int in : g.node(i).inputs) last_use[in] = std::max(last_use[in], i);
  std::vector<Array> values(count);
  std::vector<uint8_t> finite(count, 1), after_collective(count, 0);
  int bad_input_node = -1;
  RunContext ctx;
  ctx.replica = b.replica;
  for (int i = 0; i < count && !r.found; ++i) {
    const Node& n = g.node(i);
    if (n.op == Op::Check) continue;
    if (op_kind(n.op) == OpKind::kControl || n.op == Op::Output) {
      r.problem = fmt::format("the search stopped at {} at {}: the ops of loops and branches are "
                              "covered by the replayed check report only", op_name(n.op), describe_site(n.site));
      break;
    }
    std::vector<Array> ins;
    bool inputs_finite = true;
    for (int in : n.inputs) {
      ins.push_back(values[in]);
      inputs_finite = inputs_finite && finite[in];
      after_collective[i] |= after_collective[in];
    }
    after_collective[i] |= op_kind(n.op) == OpKind::kCollective;
    if (n.op == Op::Parameter) {
      const auto k = static_cast<size_t>(n.attrs.index);
      if (k >= b.inputs.size()) throw std::logic_error("replay: parameter beyond the bundle's inputs");
      values[i] = b.inputs[k].second;
    } else if (n.op == Op::Constant) {
      values[i] = n.attrs.value ? *n.attrs.value : Array::full(n.dtype, n.shape, n.attrs.scalar);
    } else {
      values[i] = reference_eval(n.op, n.attrs, ValueType{n.dtype, n.shape}, ins, &ctx);
    }
    const Scan bad = scan_non_finite(values[i]);
    finite[i] = bad.first < 0;
    if (n.op == Op::Parameter && !finite[i] && r.bad_input.empty()) {
      r.bad_input = b.inputs[static_cast<size_t>(n.attrs.index)].first;
      r.bad_input_index = multi_index(n.shape, bad.first);
      r.bad_input_note = fmt::format("{} NaN and {} Inf values, first at {}: {}", bad.nan, bad.inf,
                              index_str(r.bad_input_index), value_str(values[i].at_as_double(bad.first)));
      bad_input_node = i;
    }
    const bool reads_bad_input =
        bad_input_node >= 0 && std::find(n.inputs.begin(), n.inputs.end(), bad_input_node) != n.inputs.end();
    if (reads_bad_input && r.op.empty()) {  // the first reader of the bad input: named, search goes on
      r.bad_input_note += fmt::format("; first read by {} {} at {}", op_name(n.op), type_str(n.dtype, n.shape),
                               describe_site(n.site));
      bad_input_node = -1;
    }
    int64_t at = -1;
    const Shape* space = &n.shape;
    if (const std::optional<CheckKind> ic = op_input_check(n.op);
        ic && check_kind_info(*ic).bad == BadRule::kOutsideRange && ins.size() >= 2) {
      const Array& idx = ins[1];
      const int64_t bound = ins[0].shape()[static_cast<size_t>(n.attrs.axis)];
      for (int64_t e = 0; e < idx.size() && at < 0; ++e) {
        const double v = idx.at_as_double(e);
        if (v < 0 || v >= static_cast<double>(bound)) at = e;
      }
      if (at >= 0) {
        space = &g.node(n.inputs[1]).shape;
        describe_op(g, i, r);
        r.index = multi_index(*space, at);
        r.problem = fmt::format("read index {} at {} of operand 1, outside [0, {})",
                                value_str(idx.at_as_double(at)), index_str(r.index), bound);
      }
    }
    if (!r.found && !finite[i] && n.op != Op::Parameter && n.op != Op::Constant && inputs_finite) {
      at = bad.first;
      describe_op(g, i, r);
      r.index = multi_index(n.shape, at);
      r.problem = fmt::format("produced {} NaN and {} Inf values from finite operands; first at {}: {}",
                              bad.nan, bad.inf, index_str(r.index), value_str(values[i].at_as_double(at)));
    }
    if (r.found) {
      r.after_collective = after_collective[i];
      for (size_t k = 0; k < n.inputs.size(); ++k)
        r.operands.push_back(operand_line(static_cast<int>(k), g, n.inputs[k], ins[k], *space, at, b));
      break;
    }
    for (int in : n.inputs)
      if (last_use[in] == i) values[in] = Array();
  }
}

std::string format_replay(const ReplayResult& r) {
  const ReplayBundle& b = r.bundle;
  std::string s = fmt::format("fjit replay of {}: '{}' at step {}, replica {} of {}, every automatic check on\n",
                              b.dir, b.function, b.step, b.replica, b.num_replicas);
  if (r.check_report.empty())
    s += "  the replayed step raised no check (a collective's value, which the replay takes from this "
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
  s += fmt::format("  first bad op in plan order: {} {} at {}\n    {}\n", r.op, r.type, r.site, r.problem);
  for (const std::string& line : r.operands) s += fmt::format("    {}\n", line);
  if (r.after_collective)
    s += "    (downstream of a collective: the replay used this replica's own value for it)\n";
  if (!r.stack.empty())
    s += fmt::format("    stack at trace time:\n      {}\n", fmt::join(split_lines(r.stack), "\n      "));
  return s;
}

}  // namespace fjit
