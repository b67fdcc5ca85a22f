#include "core/runtime/jit.h"

namespace fjit::detail {

uint64_t mix_hash(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

uint64_t hash_string(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void find_passthrough(const TraceContext& ctx, const std::vector<Tensor>& outs, OutTree& tree) {
  tree.passthrough.assign(outs.size(), -1);
  const Graph& g = ctx.graph;
  // Input dict leaves by path "argN.name".
  auto find_input = [&](const std::string& path) -> int {
    for (size_t i = 0; i < g.parameters.size(); ++i)
      if (g.node(g.parameters[i]).attrs.name == path) return static_cast<int>(i);
    return -1;
  };
  for (size_t d = 0; d < tree.dict_names.size(); ++d) {
    std::vector<size_t> leaves;
    for (size_t k = 0; k < outs.size(); ++k)
      if (tree.leaf_dict[k] == static_cast<int>(d)) leaves.push_back(k);
    for (size_t arg = 0; arg < g.parameters.size(); ++arg) {
      std::vector<int> match;
      for (size_t j = 0; j < leaves.size(); ++j) {
        const int in = find_input("arg" + std::to_string(arg) + "." + tree.dict_names[d][j]);
        if (in < 0) break;
        const Node& p = g.node(g.parameters[in]);
        if (p.dtype != outs[leaves[j]].dtype() || p.shape != outs[leaves[j]].shape()) break;
        match.push_back(in);
      }
      if (match.size() == leaves.size() && !leaves.empty()) {
        for (size_t j = 0; j < leaves.size(); ++j) tree.passthrough[leaves[j]] = match[j];
        break;
      }
    }
  }
}

}  // namespace fjit::detail
