#include "checks/report.h"

#include "checks/deadline_report.h"
#include "checks/fpe_report.h"

#include <fmt/args.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/ir/check_payload.h"
#include "core/ir/region.h"
#include "core/trace/stack_trace.h"

namespace fjit {
namespace {

using namespace check_payload;

// A NaN's sign bit means nothing to a reader ("-nan" from 0 * inf): print every NaN as "nan".
double unsigned_nan(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

void push_value(fmt::dynamic_format_arg_store<fmt::format_context>& store, double v, DType t) {
  v = unsigned_nan(v);
  switch (t) {
    case DType::f32: store.push_back(static_cast<float>(v)); break;
    case DType::f64: store.push_back(v); break;
    case DType::i32: store.push_back(static_cast<int64_t>(v)); break;
    case DType::boolean: store.push_back(v != 0); break;
    case DType::u8: case DType::u32: store.push_back(static_cast<int64_t>(v)); break;
    case DType::f16: case DType::bf16: store.push_back(static_cast<float>(v)); break;
  }
}

std::string user_message(const CheckSite& site, std::span<const double> values,
                         std::span<const DType> types) {
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  for (size_t k = 0; k < values.size(); ++k)
    push_value(store, values[k], k < types.size() ? types[k] : DType::f64);
  try {
    return fmt::vformat(site.format, store);
  } catch (const fmt::format_error&) {  // validated at trace time; keep the report anyway
    std::string s = site.format + " [values:";
    for (double v : values) s += fmt::format(" {}", v);
    return s + "]";
  }
}

std::string automatic_message(const CheckSite& site, std::span<const double> v) {
  if (v.size() < kMaxCheckValues) return std::string(check_kind_name(site.kind)) + " in " + site.op;
  const auto bad = static_cast<int64_t>(v[kBadCount]);
  const auto first = static_cast<int64_t>(v[kFirstIndex]);
  const std::string at = fmt::format("first at flat index {}: {}", first, unsigned_nan(v[kFirstValue]));
  const CheckKindInfo& info = check_kind_info(site.kind);  // core/ir/check_kinds.def
  const double detail = v[kDetail];
  const char* message = detail == 0 && *info.message_no_detail ? info.message_no_detail : info.message;
  if (*message == '\0') return site.op;
  return fmt::format(fmt::runtime(message), fmt::arg("op", site.op), fmt::arg("bad", bad),
                     fmt::arg("detail", detail), fmt::arg("others", bad - static_cast<int64_t>(detail)),
                     fmt::arg("first", first), fmt::arg("value", unsigned_nan(v[kFirstValue])),
                     fmt::arg("at", at));
}

bool internal_file(const char* file) {
  const std::string rel = relative_to_source_dir(file);
  return rel.starts_with("core/") || rel.starts_with("checks/") || rel.starts_with("parallel/");
}

std::string replica_list(const std::vector<int>& rs, int n) {
  std::string s = rs.size() == 1 ? "replica " : "replicas ";
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
  return s + " of " + std::to_string(n);
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out = pad;
  for (char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

// Check nodes by site id, in the graph and in the sub-graphs of its control-flow ops.
void find_check_nodes(const Graph& g, std::vector<const Node*>& out, std::vector<const Graph*>& owner) {
  const int n = static_cast<int>(out.size());
  for (const Node& node : g.nodes()) {
    if (node.op == Op::Check && node.attrs.index >= 0 && node.attrs.index < n) {
      out[node.attrs.index] = &node;
      owner[node.attrs.index] = &g;
    }
    if (node.attrs.region && node.op != Op::Output)
      for (const auto& sub : node.attrs.region->graphs) find_check_nodes(*sub, out, owner);
  }
}

}  // namespace

int RaisedChecks::count() const {
  int n = 0;
  for (const auto& r : replicas) n += r.empty() ? 0 : 1;
  return n;
}

bool RaisedChecks::root_cause(const CheckSite& site, int id) const {
  if (!raised(id)) return false;
  for (int u : site.upstream)
    if (u < static_cast<int>(replicas.size()) && raised(u)) return false;
  return true;
}

std::string check_message(const CheckSite& site, std::span<const double> values,
                          std::span<const DType> types) {
  // A predicate kind (user, loss_scale_overflow) carries the caller's message and values.
  if (check_kind_info(site.kind).reads == CheckReads::kNothing)
    return user_message(site, values.first(std::min<size_t>(values.size(), site.num_values)), types);
  return automatic_message(site, values);
}

bool validate_check_format(const std::string& format, std::span<const DType> types, std::string* error) {
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  for (DType t : types) push_value(store, 0, t);
  try {
    (void)fmt::vformat(format, store);
    return true;
  } catch (const fmt::format_error& e) {
    *error = e.what();
    return false;
  }
}

std::string describe_site(const Site& site) {
  if (site.known() && !internal_file(site.file))
    return site.str() + (site.function ? std::string(" in ") + site.function : "");
  if (site.stack) return user_call_site(*site.stack);
  return site.str();
}

std::string format_check_report(const Executable& exe, const RaisedChecks& raised,
                                const char* function, CheckPolicy policy) {
  const int n = exe.num_check_sites();
  // Value dtypes come from the check nodes of the compiled graph (found by site id).
  std::vector<const Node*> check_node(n, nullptr);
  std::vector<const Graph*> check_graph(n, nullptr);
  if (exe.graph) find_check_nodes(*exe.graph, check_node, check_graph);
  const int count = raised.count();
  std::string out = fmt::format("fjit: check failed in '{}' at step {}: {} check{} raised (policy: {})",
                                function, raised.step, count, count == 1 ? "" : "s",
                                check_policy_name(policy));
  bool first = true;
  for (int id = 0; id < n && id < static_cast<int>(raised.replicas.size()); ++id) {
    if (!raised.raised(id)) continue;
    const CheckSite& site = exe.check_sites[id];
    std::vector<DType> types;
    if (check_node[id])
      for (size_t k = 1; k < check_node[id]->inputs.size(); ++k)
        types.push_back(check_graph[id]->node(check_node[id]->inputs[k]).dtype);
    const bool root = raised.root_cause(site, id);
    const Site* where = &site.site;
    const std::span<const double> values = std::span<const double>(raised.values[id]).first(kMaxCheckValues);
    out += fmt::format("\n  #{}{}{} {}", id, first ? " [first]" : "", root ? " [root cause]" : "",
                       site.kind == CheckKind::fpe ? fpe_message(exe, values, &where)
                       : id == exe.deadline_site  ? deadline_message(exe, values, &where)
                                                  : check_message(site, values, types));
    if (const double it = raised.values[id][kIterationSlot]; !site.loop.empty() && it > 0)
      out += fmt::format(" (in {} iteration {}, the {} at {})", site.loop, static_cast<int64_t>(it) - 1,
                         site.loop, site.loop_site.str());
    first = false;
    const bool op = check_kind_info(site.kind).reads != CheckReads::kNothing || site.kind == CheckKind::fpe ||
                    id == exe.deadline_site;
    // A predicate kind other than user says which (the sentinel's check: "sentinel check at").
    const std::string what = op ? "op"
                             : site.kind == CheckKind::user ? "check"
                                                           : fmt::format("{} check", check_kind_info(site.kind).label);
    out += fmt::format("\n      {} at {}", what, describe_site(*where));
    if (raised.num_replicas > 1) out += "; raised on " + replica_list(raised.replicas[id], raised.num_replicas);
    if (!root) {
      std::string causes;
      for (int u : site.upstream)
        if (u < static_cast<int>(raised.replicas.size()) && raised.raised(u)) causes += " #" + std::to_string(u);
      out += "\n      downstream of raised check" + causes;
    }
    if (where->stack) {
      const std::string stack = where->stack->to_string(8);
      if (!stack.empty()) out += "\n      stack at trace time:\n" + indent(stack, "      ");
    }
  }
  return out;
}

}  // namespace fjit
