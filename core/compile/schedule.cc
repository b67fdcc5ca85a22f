#include "core/compile/schedule.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <queue>
#include <utility>

#include "core/compile/memory_plan.h"
#include "core/ir/region.h"

namespace fjit {
namespace {

// The node at which the instruction computing `id` is lowered (compiler.cc: a GEMM or
// all-reduce update at the earliest of its results, anything else at its root).
int lowered_at(const FusionPlan& fusion, int id) {
  const int group = fusion.group_of[id];
  if (group < 0) return id;
  const FusionGroup& grp = fusion.groups[group];
  int first = grp.root;
  if (grp.kind != FusionGroup::kElementwise && grp.kind != FusionGroup::kSum)
    for (int x : grp.extra_roots) first = std::min(first, x);
  return first;
}

// Instructions that keep their graph order among themselves: collectives, and control flow
// whose bodies may call collectives or raise checks.
bool ordered(const Graph& g, const FusionPlan& fusion, int id) {
  const Node& n = g.node(id);
  if (op_kind(n.op) == OpKind::kCollective || overlappable(g, fusion, id)) return true;
  return op_kind(n.op) == OpKind::kControl && n.attrs.region && n.attrs.region->has_effects;
}

// The buffers an instruction writes: its result, and its further results' buffers, which
// follow its operands' in in_bufs (fused.h).
std::vector<int> written_buffers(const Instr& in) {
  std::vector<int> written{in.out_buf};
  written.insert(written.end(), in.in_bufs.begin() + static_cast<std::ptrdiff_t>(in.ins.size()),
                 in.in_bufs.end());
  return written;
}

const std::vector<int>& operands_of(const Graph& g, const FusionPlan& fusion, int id) {
  const int group = fusion.group_of[id];
  return group >= 0 ? fusion.groups[group].inputs : g.node(id).inputs;
}

// `units` in graph order (or the overlap's list order, whose collectives are in graph order),
// except that an all-gather of a plan input (ZeRO stage 3's parameter shards), with
// the unfused instructions that read only it, each other or plan inputs (its unpadding slice
// and reshape), runs just before the first other instruction that reads any of them, and no
// later than the next collective after it in that order: the gathered value lives from there,
// not from the step's start, and the collectives keep their graph order, which every replica
// shares whatever its plan fused. A chain that is an output of the plan stays in place; one
// nothing reads runs where the next collective does.
//
// Prefetch: the all-gather itself starts earlier, before the first reader of an earlier slot
// (the chains that run before the same unit; at least the previous slot), as early as keeps
// the gathered bytes started ahead of that reader within the largest chain's; never before a collective that precedes it in graph
// order, and in graph order among the gathers. `ahead` (per node) marks the moved all-gathers'
// roots: the plan runs them on the collective worker and waits before their first reader.
std::vector<int> sink_gathers(const Graph& g, const FusionPlan& fusion, const std::vector<int>& units,
                              std::vector<uint8_t>* ahead) {
  const int n = g.size();
  auto is_input = [&](int id) { return g.node(id).op == Op::Parameter || g.node(id).op == Op::Constant; };
  std::vector<int> root(n, -1);  // per unit of a chain: its all-gather
  std::vector<int> pos(n, -1);   // per unit: its place in `units`
  for (size_t k = 0; k < units.size(); ++k) {
    const int u = units[k];
    pos[u] = static_cast<int>(k);
    const Node& node = g.node(u);
    if (fusion.group_of[u] >= 0 || node.inputs.empty()) continue;
    if (node.op == Op::AllGather) {
      if (is_input(node.inputs[0])) root[u] = u;
      continue;
    }
    if (ordered(g, fusion, u) || op_kind(node.op) == OpKind::kControl) continue;
    int r = -1;
    bool only_chain = true;
    for (int in : node.inputs) {
      if (is_input(in)) continue;
      if (root[in] < 0 || (r >= 0 && root[in] != r)) only_chain = false;
      r = root[in];
    }
    if (only_chain && r >= 0) root[u] = r;
  }
  std::vector<int> target(n, -1);  // per all-gather: the unit its chain runs just before
  for (int u : units)
    for (int x : operands_of(g, fusion, u))
      if (root[x] >= 0 && root[u] != root[x] && target[root[x]] < 0) target[root[x]] = u;
  std::vector<uint8_t> output(n, 0);
  for (int o : g.outputs)
    if (root[o] >= 0) output[root[o]] = 1, target[root[o]] = -1;  // an output of the plan: left in place
  // No chain passes the next collective: walking back, `barrier` is where the next one runs.
  // An all-gather nothing reads (a backward replay no rule used) runs there too.
  int barrier = -1;
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    const int u = *it;
    if (root[u] == u && target[u] < 0 && !output[u]) target[u] = barrier;
    if (root[u] == u && target[u] >= 0) {
      if (barrier >= 0 && pos[barrier] < pos[target[u]]) target[u] = barrier;
      barrier = target[u];
    } else if (ordered(g, fusion, u)) {
      barrier = u;
    }
  }
  // The moved all-gathers, in graph order, and where each starts: `start` (per root).
  std::vector<int> roots;
  std::vector<int> floor;  // per root in `roots`: the place of the last other collective before it
  int last_ordered = -1;
  for (int u : units) {
    if (root[u] == u && target[u] >= 0) {
      roots.push_back(u);
      floor.push_back(last_ordered);
    } else if (ordered(g, fusion, u)) {
      last_ordered = pos[u];
    }
  }
  auto bytes_of = [&](int u) { return g.node(u).size() * static_cast<int64_t>(dtype_size(g.node(u).dtype)); };
  int64_t budget = 0;
  for (int r : roots) budget = std::max(budget, bytes_of(r));
  // Slots: the roots whose chains run before the same unit, in graph order.
  std::vector<int> start(n, -1);
  std::vector<int> slot_target;      // per slot: the unit its chains run before
  std::vector<int64_t> slot_bytes;   // per slot: its roots' bytes so far
  size_t first = 0;    // the earliest slot a root may start before (non-decreasing)
  int64_t window = 0;  // bytes of the roots of slots first + 1 .. the current one, so far
  for (size_t j = 0; j < roots.size(); ++j) {
    const int r = roots[j];
    start[r] = target[r];
    if (slot_target.empty() || slot_target.back() != target[r]) {
      slot_target.push_back(target[r]);
      slot_bytes.push_back(0);
    }
    const size_t s = slot_target.size() - 1;
    slot_bytes[s] += bytes_of(r);
    if (first < s) window += bytes_of(r);
    while (first + 1 < s && window > budget) window -= slot_bytes[++first];
    while (first < s && pos[slot_target[first]] <= floor[j]) window -= slot_bytes[++first];
    if (first == s || ahead == nullptr) continue;
    start[r] = slot_target[first];
    (*ahead)[r] = 1;
  }
  std::vector<std::vector<int>> before(n);  // per unit: what runs just before it, in graph order
  for (int u : units)
    if (root[u] >= 0 && target[root[u]] >= 0) before[root[u] == u ? start[u] : target[root[u]]].push_back(u);
  std::vector<int> order;
  order.reserve(units.size());
  for (int u : units) {
    if (root[u] >= 0 && target[root[u]] >= 0) continue;
    // The all-gathers first (the worker runs them in that order), then the rest of the chains.
    std::stable_partition(before[u].begin(), before[u].end(), [&](int x) { return root[x] == x; });
    order.insert(order.end(), before[u].begin(), before[u].end());
    order.push_back(u);
  }
  return order;
}

}  // namespace

bool overlappable(const Graph& g, const FusionPlan& fusion, int id) {
  const int group = fusion.group_of[id];
  if (group >= 0) return fusion.groups[group].kind == FusionGroup::kReduceUpdate;
  return g.node(id).op == Op::AllReduce;
}

std::vector<int> schedule_instructions(const Graph& g, const std::vector<bool>& live,
                                       const FusionPlan& fusion, bool overlap,
                                       std::vector<uint8_t>* gathers_ahead) {
  std::vector<int> units;
  for (int id = 0; id < g.size(); ++id) {
    const Op op = g.node(id).op;
    if (live[id] && op != Op::Parameter && op != Op::Output && op != Op::Constant &&
        lowered_at(fusion, id) == id)
      units.push_back(id);
  }
  if (!overlap) return sink_gathers(g, fusion, units, gathers_ahead);

  // Which unit defines each value: a group's results are defined where it is lowered, a
  // control result (an Output node) by its control instruction.
  const int n = g.size();
  std::vector<int> def(n, -1);
  for (int u : units) {
    def[u] = u;
    const int group = fusion.group_of[u];
    if (group < 0) continue;
    def[fusion.groups[group].root] = u;
    for (int x : fusion.groups[group].extra_roots) def[x] = u;
  }
  for (int id = 0; id < n; ++id)
    if (live[id] && g.node(id).op == Op::Output) def[id] = g.node(id).inputs[0];

  // Dependencies: operands, and the chain of ordered instructions in the order of their
  // collectives (an all-reduce update's is its all-reduce node, not where it is lowered).
  std::vector<std::vector<int>> users(n);
  std::vector<int> pending(n, 0);
  for (int u : units)
    for (int x : operands_of(g, fusion, u))
      if (const int d = def[x]; d >= 0 && d != u) {
        users[d].push_back(u);
        ++pending[u];
      }
  std::vector<std::pair<int, int>> chain;  // (collective node, unit)
  for (int u : units)
    if (ordered(g, fusion, u)) {
      const int group = fusion.group_of[u];
      chain.emplace_back(group >= 0 ? fusion.groups[group].product : u, u);
    }
  std::sort(chain.begin(), chain.end());
  const int none = static_cast<int>(chain.size());
  std::vector<int> reach(n, none);  // the first link of the chain an instruction leads to
  for (size_t k = 0; k < chain.size(); ++k) {
    reach[chain[k].second] = static_cast<int>(k);
    if (k > 0) {
      users[chain[k - 1].second].push_back(chain[k].second);
      ++pending[chain[k].second];
    }
  }
  for (auto it = units.rbegin(); it != units.rend(); ++it)
    for (int w : users[*it]) reach[*it] = std::min(reach[*it], reach[w]);
  // What leads to no collective (an optimizer's update of reduced gradients, checks) runs
  // after the last link it depends on, the earliest such first.
  std::vector<int> after(n, -1);  // the last link of the chain an instruction depends on
  for (int u : units) {
    if (reach[u] < none && ordered(g, fusion, u)) after[u] = reach[u];
    for (int w : users[u]) after[w] = std::max(after[w], after[u]);
  }
  std::vector<int> key(n);
  for (int u : units) key[u] = reach[u] < none ? reach[u] : none + 1 + after[u];

  // List scheduling: of the instructions whose operands exist, the one that leads to the
  // earliest collective runs first (ties in graph order), so each collective starts as soon
  // as the work it needs is done; what leads to no collective runs last.
  std::vector<int> order;
  order.reserve(units.size());
  using Key = std::pair<int, int>;  // (key, unit)
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
  for (int u : units)
    if (pending[u] == 0) ready.emplace(key[u], u);
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    order.push_back(u);
    for (int w : users[u])
      if (--pending[w] == 0) ready.emplace(key[w], w);
  }
  assert(order.size() == units.size());
  return sink_gathers(g, fusion, order, gathers_ahead);
}

std::vector<int> overlap_waits(const Executable& exe, const std::vector<uint8_t>& async) {
  const int n = static_cast<int>(exe.instrs.size());
  std::vector<int> wait(n, n);
  for (int s = 0; s < n; ++s) {
    if (!async[s]) continue;
    const Instr& in = exe.instrs[s];
    const std::vector<int> written = written_buffers(in);
    auto touches = [&](int b) {
      return b >= 0 && std::find(written.begin(), written.end(), b) != written.end();
    };
    for (int j = s + 1; j < n && wait[s] == n; ++j) {
      if (async[j]) continue;  // the worker runs it after s
      const Instr& next = exe.instrs[j];
      const OpKind kind = op_kind(next.op);
      if (kind == OpKind::kCollective || kind == OpKind::kControl || touches(next.out_buf) ||
          std::any_of(next.in_bufs.begin(), next.in_bufs.end(), touches))
        wait[s] = j;
    }
  }
  return wait;
}

void plan_arena(Executable& exe, const std::vector<uint8_t>& async,
                std::vector<PlannedValue>& planned, const std::vector<int>& planned_buf) {
  const int n = static_cast<int>(exe.instrs.size());
  exe.overlapped.assign(n, 0);
  exe.await_before.assign(n + 1, 0);
  exe.num_overlapped = 0;
  std::vector<int> wait(n, n);
  std::vector<int> value_of_buf(exe.buffers.size(), -1);
  for (size_t v = 0; v < planned.size(); ++v) value_of_buf[planned_buf[v]] = static_cast<int>(v);
  if (std::find(async.begin(), async.end(), 1) != async.end()) {
    wait = overlap_waits(exe, async);
    for (int s = 0; s < n; ++s) {
      if (!async[s]) continue;
      const Instr& in = exe.instrs[s];
      exe.overlapped[s] = 1;
      exe.await_before[wait[s]] = ++exe.num_overlapped;  // later tickets wait later
      for (int b : written_buffers(in))
        if (const int v = b >= 0 ? value_of_buf[b] : -1; v >= 0)
          planned[v].last_use = std::max(planned[v].last_use, wait[s]);
      // Donation (Executable::can_alias): an input read by the worker counts as read until the
      // wait.
      for (size_t k = 0; k < in.ins.size(); ++k) {
        const BufferRef& r = exe.buffers[in.in_bufs[k]];
        if (r.kind != BufferRef::kInput || exe.input_last_read[r.where] >= wait[s]) continue;
        exe.input_last_read[r.where] = wait[s];
        exe.input_last_read_in_place[r.where] = false;
      }
    }
  }
  for (;;) {
    MemoryPlan plan = plan_memory(planned);
    bool changed = false;
    for (int s = 0; s < n; ++s) {
      if (!async[s]) continue;
      const Instr& in = exe.instrs[s];
      const int result = value_of_buf[in.out_buf];
      for (size_t k = 0; k < in.ins.size(); ++k) {
        const int v = value_of_buf[in.in_bufs[k]];
        if (v < 0 || planned[v].last_use >= wait[s]) continue;
        if (result >= 0 && plan.offset[v] == plan.offset[result]) continue;  // in place
        planned[v].last_use = wait[s];
        changed = true;
      }
    }
    if (changed) continue;
    for (size_t v = 0; v < planned.size(); ++v) exe.buffers[planned_buf[v]].where = plan.offset[v];
    exe.arena_bytes = plan.arena_bytes;
    exe.min_live_bytes = plan.min_live_bytes;
    return;
  }
}

}  // namespace fjit
