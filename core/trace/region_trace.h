// Internal: tracing a function once into a sub-graph of the current trace (the bodies and
// branches of control-flow ops, core/trace/control_flow.h), and inlining such a graph back.
//
// trace_region() runs `fn` on placeholder Tensors in the current trace, then splits what it
// recorded: the nodes that depend on a placeholder form the region's graph; values of the
// enclosing trace that they read (a lambda's captures, or loop-invariant values computed
// inside `fn`) become the graph's extra parameters, listed in `captured`. Nodes that depend
// on no placeholder stay in the enclosing trace, computed once: a check among them is
// checked once, not per iteration. Tensors made inside `fn` are not valid after it returns.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/ir/region.h"
#include "core/trace/tensor.h"

namespace fjit::detail {

struct TracedRegion {
  std::shared_ptr<Graph> graph;  // parameters: one per placeholder, then one per captured
  std::vector<Tensor> captured;  // values of the enclosing trace, in parameter order
  std::vector<int> sites;        // check sites recorded inside (their node is -1)
};

using RegionFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& placeholders)>;

// REQUIRES: an active trace. `api` names the op in errors. A TraceError from `fn` leaves the
// trace as it was and propagates.
TracedRegion trace_region(const char* api, const std::vector<ValueType>& params, const RegionFn& fn,
                          const Loc& loc);

// Records `g`'s nodes into the current trace with its parameters bound to `params`; returns
// its outputs. Check nodes are left out when `keep_checks` is false (a recomputation of values
// already checked); collectives and control ops with effects get fresh effect ids.
std::vector<Tensor> inline_graph(const Graph& g, const std::vector<Tensor>& params, bool keep_checks);

// The results of control node `node`, one output node each (made on demand; equal requests
// share a node).
Tensor control_output(const Tensor& node, int k);

// `g` with its parameters replaced by `params` (in this order): old parameter k becomes new
// parameter old_to_new[k]; the others are unused.
std::shared_ptr<Graph> remap_params(const Graph& g, const std::vector<ValueType>& params,
                                    const std::vector<int>& old_to_new);

// Names the innermost loop around the given sites, for those not already inside a loop.
void tag_loop_sites(const std::vector<int>& sites, const char* loop, const Site& loop_site);

}  // namespace fjit::detail
