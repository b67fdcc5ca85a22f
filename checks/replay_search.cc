// The first bad op: a forward walk over the compiled graph with the reference kernels, each
// value kept until its last reader has run.
#include "checks/replay_search.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "checks/report.h"
#include "core/ir/check_kind.h"
#include "core/ir/region.h"
#include "core/kernels/collective/communicator.h"
#include "core/trace/stack_trace.h"

namespace fjit {
namespace {

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

std::string value_str(double v) { return fmt::format("{:.6g}", v); }

// Where a value comes from: an input leaf, or an op and its call site.
std::string origin(const Graph& g, int id, const ReplayBundle& b, bool top) {
  const Node& n = g.node(id);
  if (n.op == Op::Parameter && !top) return fmt::format("operand {} of the body", n.attrs.index);
  if (n.op == Op::Parameter) {
    const auto k = static_cast<size_t>(n.attrs.index);
    return fmt::format("input '{}'", k < b.inputs.size() ? b.inputs[k].first : n.attrs.name);
  }
  if (n.op == Op::Constant) return "a constant";
  return fmt::format("%{} {} at {}", id, op_name(n.op), describe_site(n.site));
}

// One operand's line: origin, type, range, bad counts, and its value(s) at the offending
// element `at` of the result's (or index operand's) index space `space`.
std::string operand_line(int k, const Graph& g, bool top, int id, const Array& v, const Shape& space,
                         int64_t at, const ReplayBundle& b) {
  std::string s = fmt::format("operand {}: {} {}", k, origin(g, id, b, top), type_str(v.dtype(), v.shape()));
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

// The nodes the automatic-check pass built (core/compile/passes/automatic_checks.cc): every
// reader of each is an automatic check or another such node. A reader of a bad value named
// to the user is never one of them.
std::vector<uint8_t> check_machinery(const Graph& g) {
  const int count = static_cast<int>(g.nodes().size());
  std::vector<std::vector<int>> readers(count);
  for (int i = 0; i < count; ++i)
    for (int in : g.node(i).inputs) readers[in].push_back(i);
  std::vector<uint8_t> out(count, 0);
  for (int o : g.outputs) out[o] = 2;  // 2: kept (an output is the user's)
  for (int i = count - 1; i >= 0; --i) {
    const Node& n = g.node(i);
    if (n.op == Op::Check || out[i] == 2 || readers[i].empty()) {
      out[i] = 0;
      continue;
    }
    bool only_checks = true;
    for (int r : readers[i]) {
      const Node& rn = g.node(r);
      const bool automatic_check = rn.op == Op::Check && rn.attrs.axis != static_cast<int64_t>(CheckKind::user);
      only_checks = only_checks && (automatic_check || out[r] == 1);
    }
    out[i] = only_checks ? 1 : 0;
  }
  return out;
}

Array row_of(const Array& a, int64_t i) {
  Shape row(a.shape().begin() + 1, a.shape().end());
  Array out(a.dtype(), row);
  std::memcpy(out.raw(), static_cast<const std::byte*>(a.raw()) + i * out.nbytes(), out.nbytes());
  return out;
}

void set_row(Array& stacked, int64_t i, const Array& row) {
  std::memcpy(static_cast<std::byte*>(stacked.raw()) + i * row.nbytes(), row.raw(), row.nbytes());
}

// One replica's walk: every node of the plan's graph and of the graphs of its loops and
// branches, in the order the plan runs them, with the reference kernels.
class Walker {
 public:
  Walker(const ReplayBundle& b, RunContext ctx, bool with_peers, ReplayResult& r)
      : b_(b), ctx_(ctx), with_peers_(with_peers), r_(r) {}

  int64_t found_at = -1;  // the position (nodes walked before it) of the op found

  std::vector<Array> walk(const Graph& g, const std::vector<Array>& params, bool top) {
    const int count = static_cast<int>(g.nodes().size());
    std::vector<int> last_use(count, -1);
    for (int i = 0; i < count; ++i)
      for (int in : g.node(i).inputs) last_use[in] = std::max(last_use[in], i);
    for (int o : g.outputs) last_use[o] = count;
    const std::vector<uint8_t> machinery = check_machinery(g);
    std::vector<Array> values(count);
    std::vector<std::vector<Array>> results(count);
    std::vector<uint8_t> finite(count, 1), after_collective(count, 0);
    int bad_input_node = -1;
    for (int i = 0; i < count; ++i) {
      const Node& n = g.node(i);
      if (n.op == Op::Check) continue;
      ++position_;
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
        if (top) {
          if (k >= b_.inputs.size()) throw std::logic_error("replay: parameter beyond the bundle's inputs");
          values[i] = b_.inputs[k].second;
        } else {
          if (k >= params.size()) throw std::logic_error("replay: parameter beyond the region's operands");
          values[i] = params[k];
        }
      } else if (n.op == Op::Constant) {
        values[i] = n.attrs.value ? *n.attrs.value : Array::full(n.dtype, n.shape, n.attrs.scalar);
      } else if (n.op == Op::Output) {
        values[i] = results[n.inputs[0]].at(static_cast<size_t>(n.attrs.index));
      } else if (op_kind(n.op) == OpKind::kControl) {
        results[i] = control(n, ins);
        values[i] = Array::full(DType::boolean, {}, 1);
      } else {
        values[i] = reference_eval(n.op, n.attrs, ValueType{n.dtype, n.shape}, ins, &ctx_);
      }
      const Scan bad = scan_non_finite(values[i]);
      finite[i] = bad.first < 0;
      if (top && n.op == Op::Parameter && !finite[i] && r_.bad_input.empty()) {
        r_.bad_input = b_.inputs[static_cast<size_t>(n.attrs.index)].first;
        r_.bad_input_index = multi_index(n.shape, bad.first);
        r_.bad_input_note = fmt::format("{} NaN and {} Inf values, first at {}: {}", bad.nan, bad.inf,
                                        index_str(r_.bad_input_index), value_str(values[i].at_as_double(bad.first)));
        bad_input_node = i;
      }
      const bool reads_bad_input = bad_input_node >= 0 && !machinery[i] &&
                                   std::find(n.inputs.begin(), n.inputs.end(), bad_input_node) != n.inputs.end();
      if (reads_bad_input && r_.op.empty()) {  // the first reader the user wrote: named, search goes on
        r_.bad_input_note += fmt::format("; first read by {} {} at {}", op_name(n.op), type_str(n.dtype, n.shape),
                                         describe_site(n.site));
        bad_input_node = -1;
      }
      if (!r_.found) inspect(g, top, i, ins, values[i], bad, inputs_finite, after_collective[i]);
      for (int in : n.inputs)
        if (last_use[in] == i) values[in] = Array();
    }
    std::vector<Array> outs;
    for (int o : g.outputs) outs.push_back(values[o]);
    return outs;
  }

 private:
  struct Frame {
    std::string what;  // "scan at f.cc:12"
    int64_t iteration = -1;
  };

  // Whether node i is the first bad op; if so fills r_.
  void inspect(const Graph& g, bool top, int i, const std::vector<Array>& ins, const Array& value, const Scan& bad,
               bool inputs_finite, bool downstream_of_collective) {
    const Node& n = g.node(i);
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
        describe_op(g, i, r_);
        r_.index = multi_index(*space, at);
        r_.problem = fmt::format("read index {} at {} of operand 1, outside [0, {})",
                                 value_str(idx.at_as_double(at)), index_str(r_.index), bound);
      }
    }
    // A collective's non-finite result from finite operands comes from another replica's
    // value: with the other replicas replayed, that replica's own op is the one to name.
    const bool origin_elsewhere = op_kind(n.op) == OpKind::kControl || n.op == Op::Output ||
                                  (with_peers_ && op_kind(n.op) == OpKind::kCollective);
    if (!r_.found && bad.first >= 0 && n.op != Op::Parameter && n.op != Op::Constant && inputs_finite &&
        !origin_elsewhere) {
      at = bad.first;
      describe_op(g, i, r_);
      r_.index = multi_index(n.shape, at);
      r_.problem = fmt::format("produced {} NaN and {} Inf values from finite operands; first at {}: {}",
                               bad.nan, bad.inf, index_str(r_.index), value_str(value.at_as_double(at)));
    }
    if (!r_.found) return;
    found_at = position_;
    r_.replica = ctx_.replica;
    r_.after_collective = downstream_of_collective;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      r_.operands.push_back(operand_line(static_cast<int>(k), g, top, n.inputs[k], ins[k], *space, at, b_));
    std::vector<std::string> where;
    for (const Frame& f : frames_)
      where.push_back(f.iteration >= 0 ? fmt::format("iteration {} of {}", f.iteration, f.what) : f.what);
    r_.inside = fmt::format("{}", fmt::join(where.rbegin(), where.rend(), ", in "));
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
      if (it->iteration >= 0) {
        r_.iteration = it->iteration;
        break;
      }
  }

  std::string loop_name(const Node& n) const {
    const Region& reg = *n.attrs.region;
    const std::string name = reg.loop.empty() ? std::string(op_name(n.op)) : reg.loop;
    return fmt::format("{} at {}", name, describe_site(reg.site.known() ? reg.site : n.site));
  }

  std::vector<Array> control(const Node& n, const std::vector<Array>& ins) {
    const Region& reg = *n.attrs.region;
    const int nc = reg.num_carry;
    frames_.push_back({loop_name(n), -1});
    struct Pop {
      std::vector<Frame>& f;
      ~Pop() { f.pop_back(); }
    } pop{frames_};
    std::vector<Array> res;
    switch (n.op) {
      case Op::Scan: {
        const int nx = reg.num_xs;
        const int nouts = static_cast<int>(reg.outputs.size());
        const int ny = static_cast<int>(reg.graphs[0]->outputs.size()) - nc;
        res.resize(nouts);
        for (int k = nc; k < nouts; ++k) res[k] = Array(reg.outputs[k].dtype, reg.outputs[k].shape);
        std::vector<Array> carry(ins.begin(), ins.begin() + nc);
        std::vector<Array> params(ins.begin(), ins.end());
        for (int64_t step = 0; step < reg.length; ++step) {
          const int64_t i = reg.reverse ? reg.length - 1 - step : step;
          frames_.back().iteration = i;
          for (int j = 0; j < nc; ++j) {
            params[j] = carry[j];
            if (nc + ny + j < nouts) set_row(res[nc + ny + j], i, carry[j]);
          }
          for (int k = nc; k < nc + nx; ++k) params[k] = row_of(ins[k], i);
          const std::vector<Array> outs = walk(*reg.graphs[0], params, false);
          for (int j = 0; j < nc; ++j) carry[j] = outs[j];
          for (int k = 0; k < ny; ++k) set_row(res[nc + k], i, outs[nc + k]);
        }
        for (int j = 0; j < nc; ++j) res[j] = carry[j];
        return res;
      }
      case Op::WhileLoop: {
        std::vector<Array> params(ins.begin(), ins.end());
        for (int64_t i = 0;; ++i) {
          frames_.back().iteration = i;
          if (walk(*reg.graphs[0], params, false).at(0).at_as_double(0) == 0) break;
          const std::vector<Array> next = walk(*reg.graphs[1], params, false);
          for (int j = 0; j < nc; ++j) params[j] = next[j];
        }
        return std::vector<Array>(params.begin(), params.begin() + nc);
      }
      case Op::Cond: {
        const bool pred = ins.at(0).at_as_double(0) != 0;
        frames_.back().what = fmt::format("the {} branch of {}", pred ? "true" : "false", frames_.back().what);
        return walk(*reg.graphs[pred ? 0 : 1], std::vector<Array>(ins.begin() + 1, ins.end()), false);
      }
      default:  // custom_vjp (its fwd), remat
        return walk(*reg.graphs[0], ins, false);
    }
  }

  const ReplayBundle& b_;
  RunContext ctx_;
  bool with_peers_;
  ReplayResult& r_;
  int64_t position_ = 0;
  std::vector<Frame> frames_;
};

}  // namespace

int64_t search_first_bad_op(const Executable& exe, const ReplayBundle& b, const RunContext& ctx, ReplayResult& r) {
  Walker w(b, ctx, ctx.comm != nullptr && ctx.comm->size() > 1, r);
  w.walk(*exe.graph, {}, true);
  return w.found_at;
}

}  // namespace fjit
