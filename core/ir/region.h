// Region: the sub-graphs of a control-flow op (scan, cond, custom_vjp, while_loop, remat), each
// traced once.
//
// A control node's inputs feed its graphs' parameters and its results are `output` nodes
// (Op::Output, attrs.index = which result), typed by `outputs` below. What the graphs are:
//   scan        graphs {body}. Inputs [carry..., xs..., captured...]; the body's parameters
//               are [carry..., one row of each xs..., captured...] and its outputs
//               [new carry..., y...]. Results: [final carry..., stacked ys ([length, ...y])...,
//               stacked carries ([length, ...carry]: the carry entering each iteration, which
//               the VJP reads; only written when something reads it)...].
//   cond        graphs {true branch, false branch}. Inputs [pred, operands...]; both branches
//               take [operands...] and return the results, of equal types.
//   custom_vjp  graphs {fwd, bwd}. Inputs [args..., fwd's captured..., bwd's captured...];
//               fwd takes all inputs and returns [out..., residuals...] (the results); bwd
//               takes [residuals..., cotangents of out..., bwd's captured...] and returns one
//               cotangent per arg. Only fwd runs in the forward plan; the VJP rule inlines bwd.
//   while_loop  graphs {cond_fn, body_fn}. Inputs [carry..., captured...]; both take all
//               inputs; cond_fn returns one bool scalar, body_fn the new carry. Results: [final
//               carry...]. The trip count is decided at run time.
//   remat       graphs {fn}. Inputs [args..., captured...]; fn takes all inputs and returns the
//               results. Its VJP is another remat whose function recomputes fn and
//               differentiates it, so fn's intermediate values live only inside each call.
// Regions are immutable once built and shared by every node (and pass) that refers to them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/ir/graph.h"

namespace fjit {

struct Region {
  std::vector<std::shared_ptr<const Graph>> graphs;
  int num_carry = 0;      // scan, while_loop: carry leaves; custom_vjp, remat: args
  int num_xs = 0;         // scan: sliced leaves; custom_vjp: out leaves (before residuals)
  int64_t length = 0;     // scan: trip count
  bool reverse = false;   // scan: iterates from length-1 down to 0 (row i is still row i)
  std::vector<ValueType> outputs;  // the results' types, in output order
  // The innermost loop's name ("scan", "fori_loop", "while_loop") and call site, for check
  // reports of the checks inside; empty for cond, custom_vjp and remat, whose checks report
  // the loop around them.
  std::string loop;
  Site site;
  bool has_effects = false;  // some graph holds a check or collective (set by finish())
  // while_loop's guards (core/compile/loop_guard.h): the trip limit (0: none) and the check
  // sites raised when the limit is reached or the step's deadline passes (-1: none).
  int64_t max_trips = 0;
  int trip_site = -1;
  int timeout_site = -1;

  // Sets has_effects from the graphs. Call once the graphs are final.
  void finish();
};

// The result type of a control op (a bool scalar placeholder) or of an output node, after
// checking the inputs against the region's graphs. Throws ShapeRuleError (core/ir/shape_rules.h).
ValueType control_type(Op op, const Attrs& attrs, std::span<const ValueType> ins);

}  // namespace fjit
