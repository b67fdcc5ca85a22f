#include "core/ir/check_upstream.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace fjit {
namespace {

int predicate_of(const Graph& g, const CheckSite& s) { return g.node(s.node).inputs[0]; }

// (latest checked node, site id): program order of checks, strict and total.
std::pair<int, int> key_of(const Graph& g, const std::vector<int>& checked, const CheckSite& s, int id) {
  return {checked.empty() ? predicate_of(g, s) : checked.back(), id};
}

// Ancestors of `root` (and root itself), as a mask over node ids.
std::vector<char> ancestors(const Graph& g, int root) {
  std::vector<char> seen(root + 1, 0);
  std::vector<int> stack{root};
  seen[root] = 1;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    for (int in : g.node(n).inputs)
      if (!seen[in]) {
        seen[in] = 1;
        stack.push_back(in);
      }
  }
  return seen;
}

bool any_in(const std::vector<int>& nodes, const std::vector<char>& mask) {
  for (int n : nodes)
    if (n < static_cast<int>(mask.size()) && mask[n]) return true;
  return false;
}

}  // namespace

std::vector<int> checked_values(const Graph& g, int check_node) {
  std::vector<int> out, stack{g.node(check_node).inputs[0]}, seen;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    const Node& node = g.node(n);
    if (node.op == Op::Constant) continue;
    if (node.dtype != DType::boolean || node.op == Op::Parameter) {
      out.push_back(n);
      continue;
    }
    for (int in : node.inputs) stack.push_back(in);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void link_new_site(const Graph& g, std::vector<CheckSite>& sites, int s) {
  if (sites[s].node < 0) return;
  const std::vector<int> mine = checked_values(g, sites[s].node);
  const auto my_key = key_of(g, mine, sites[s], s);
  const std::vector<char> my_ancestors = ancestors(g, predicate_of(g, sites[s]));
  sites[s].upstream.clear();
  for (int e = 0; e < static_cast<int>(sites.size()); ++e) {
    if (e == s || sites[e].node < 0) continue;
    const std::vector<int> theirs = checked_values(g, sites[e].node);
    if (key_of(g, theirs, sites[e], e) < my_key) {
      if (any_in(theirs, my_ancestors)) sites[s].upstream.push_back(e);
    } else if (any_in(mine, ancestors(g, predicate_of(g, sites[e])))) {
      auto& up = sites[e].upstream;
      up.insert(std::upper_bound(up.begin(), up.end(), s), s);
    }
  }
}

void link_all_sites(const Graph& g, std::vector<CheckSite>& sites) {
  const int num_sites = static_cast<int>(sites.size());
  // Nothing to link; and with no words per node, &reach[n * words] below would index an
  // empty vector (undefined behaviour, found by UBSan).
  if (num_sites == 0) return;
  const size_t words = (num_sites + 63) / 64;
  std::vector<std::vector<int>> checked(num_sites);
  std::vector<std::vector<int>> checkers_of(g.size());  // node -> sites checking it
  for (int s = 0; s < num_sites; ++s) {
    if (sites[s].node < 0) continue;  // inside a region: no links
    checked[s] = checked_values(g, sites[s].node);
    for (int n : checked[s]) checkers_of[n].push_back(s);
  }
  // reach[n]: the sites that check n or one of its ancestors.
  std::vector<uint64_t> reach(static_cast<size_t>(g.size()) * words, 0);
  for (int n = 0; n < g.size(); ++n) {
    uint64_t* r = &reach[n * words];
    for (int in : g.node(n).inputs)
      for (size_t w = 0; w < words; ++w) r[w] |= reach[in * words + w];
    for (int s : checkers_of[n]) r[s / 64] |= uint64_t{1} << (s % 64);
  }
  for (int b = 0; b < num_sites; ++b) {
    sites[b].upstream.clear();
    if (sites[b].node < 0) continue;
    const auto b_key = key_of(g, checked[b], sites[b], b);
    const uint64_t* r = &reach[predicate_of(g, sites[b]) * words];
    for (int a = 0; a < num_sites; ++a)
      if (a != b && sites[a].node >= 0 && (r[a / 64] >> (a % 64) & 1) && key_of(g, checked[a], sites[a], a) < b_key)
        sites[b].upstream.push_back(a);
  }
}

}  // namespace fjit
