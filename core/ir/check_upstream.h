// Which checks feed which: the relation a report uses to mark root causes.
//
// A check's "checked values" are what its predicate looks at: walking back from the
// predicate through bool-typed nodes, the first non-bool nodes (and bool parameters);
// constants are skipped (they are the same every step). Check A is upstream of check B when
// one of A's checked values is an ancestor of (or is) B's predicate and A comes first in
// program order: key(A) < key(B), where key(X) = (latest node X checks, X's site id). The
// key makes the relation acyclic, so among raised checks at least one is a root cause.
//
// Both functions fill CheckSite::upstream (sorted site ids) and agree with each other.
#pragma once

#include <vector>

#include "core/ir/check_site.h"
#include "core/ir/graph.h"

namespace fjit {

// The checked values of the check node `check_node` of `g`, ascending.
std::vector<int> checked_values(const Graph& g, int check_node);

// Trace time: `sites[s]` was just added; links it with the sites before it, in both
// directions. Cost: one walk over the ancestors of its predicate, plus one per earlier site
// whose key is larger (a check of an older value written after a check of a newer one).
void link_new_site(const Graph& g, std::vector<CheckSite>& sites, int s);

// Recomputes every site's upstream in one forward pass over `g` with a bitset of sites per
// node: O(nodes x sites / 64). Used after the automatic-check pass renumbers the sites.
void link_all_sites(const Graph& g, std::vector<CheckSite>& sites);

}  // namespace fjit
