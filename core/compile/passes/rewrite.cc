#include "core/compile/passes/pass.h"

#include <cmath>

namespace fjit {

Graph rewrite(const Graph& g, const RewriteFn& fn, const std::vector<bool>* keep) {
  Graph out;
  std::vector<int> map(g.size(), -1);
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (keep && !(*keep)[i] && n.op != Op::Parameter) continue;
    Node mapped = n;
    for (int& in : mapped.inputs) in = map[in];
    if (n.op == Op::Parameter) {
      map[i] = out.add(std::move(mapped));
      out.parameters.push_back(map[i]);
      continue;
    }
    map[i] = fn ? fn(out, i, std::move(mapped)) : out.add(std::move(mapped));
  }
  for (int o : g.outputs) out.outputs.push_back(map[o]);
  return out;
}

std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(g.size(), false);
  for (int o : g.outputs) live[o] = true;
  for (int e : g.effects) live[e] = true;
  for (int i = g.size() - 1; i >= 0; --i)
    if (live[i])
      for (int in : g.node(i).inputs) live[in] = true;
  return live;
}

std::vector<int> reader_counts(const Graph& g) {
  std::vector<int> readers(g.size(), 0);
  for (int id = 0; id < g.size(); ++id)
    for (int in : g.node(id).inputs) ++readers[in];
  for (int o : g.outputs) ++readers[o];
  return readers;
}

bool is_plus_zero_fill(const Node& n) {
  return n.op == Op::Constant && !n.attrs.value && n.attrs.scalar == 0.0 && !std::signbit(n.attrs.scalar);
}

namespace {
class DeadCodeElimination : public Pass {
 public:
  const char* name() const override { return "dead-code-elimination"; }
  Graph run(const Graph& g) const override {
    std::vector<bool> live = live_nodes(g);
    return rewrite(g, nullptr, &live);
  }
};
}  // namespace

std::unique_ptr<Pass> make_dead_code_elimination() { return std::make_unique<DeadCodeElimination>(); }

}  // namespace fjit
