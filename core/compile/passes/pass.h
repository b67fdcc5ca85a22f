// Graph passes. Each pass maps a Graph to an equivalent Graph; the compiler runs them as an
// ordered pipeline (core/compile/compiler.cc). Passes rebuild the graph through rewrite(), which
// re-inserts nodes with hash-consing, so each rebuild also merges equal subexpressions.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/check_site.h"
#include "core/ir/graph.h"

namespace fjit {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  virtual Graph run(const Graph& g) const = 0;
};

// Rebuilds `g`: visits nodes in order with their inputs already mapped to the new graph.
// `fn` returns the new id for the old node (by default: out.add(mapped)). Nodes with
// keep[id] == false are skipped (their users must be skipped too). Parameters keep their
// order, outputs are mapped.
using RewriteFn = std::function<int(Graph& out, int old_id, Node mapped)>;
Graph rewrite(const Graph& g, const RewriteFn& fn, const std::vector<bool>* keep = nullptr);

std::unique_ptr<Pass> make_dead_code_elimination();
std::unique_ptr<Pass> make_constant_folding(int64_t max_folded_elements = 4096);
std::unique_ptr<Pass> make_algebraic_simplification();
// Casts moved before the reshapes (and narrowing casts before the transposes) they read, so
// that fusion can make them in the pass that computes their operand (cast_hoisting.cc).
std::unique_ptr<Pass> make_cast_hoisting();
// Narrowing casts of elementwise values placed right after them in the graph's order, so that
// fusion can make the cast in the value's own pass (cast_hoisting.cc).
std::unique_ptr<Pass> make_cast_placement();
// Adds of zero-padded values in disjoint ranges of one axis (slice adjoints) made one concat
// (padded_sums.cc).
std::unique_ptr<Pass> make_padded_sums();
// max_pool_grad read only by ReLU's rule (a select on its image > 0) made one masked
// max_pool_grad (relu_pool_grad.cc).
std::unique_ptr<Pass> make_relu_pool_grad();
// f32 products of reshaped patches (convolutions and their weight gradients) made products of
// the image, whose kernel gathers the patches as it packs them (patches_products.cc).
std::unique_ptr<Pass> make_patches_products();
// Automatic checks (core/compile/passes/automatic_checks.h): adds check nodes to the graph
// and their sites to *sites, which must outlive the pass.
std::unique_ptr<Pass> make_automatic_checks(std::vector<CheckSite>* sites);

// Node ids that feed the outputs or an effect.
std::vector<bool> live_nodes(const Graph& g);
// How many times each node is read: once per input slot that names it, and once per output.
std::vector<int> reader_counts(const Graph& g);
// Whether n is a constant fill of +0 (no data, every element +0.0), of any shape.
bool is_plus_zero_fill(const Node& n);

}  // namespace fjit
