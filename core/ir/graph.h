// Graph: an SSA list of Nodes in creation (and so topological) order.
//
// Inserting a node equal to an existing one returns the existing id (hash-consing), so common
// subexpressions are shared as they are traced. Ops with effects (checks, collectives) carry
// a unique attribute and are recorded in effects() so dead-code elimination keeps them.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/ir/node.h"

namespace fjit {

class Graph {
 public:
  // Returns the id of `n` in this graph: a new one, or that of an equal existing node.
  // Requires every input id to be < size().
  int add(Node n);
  const Node& node(int id) const { return nodes_[id]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Parameter node ids in argument (flattened leaf) order.
  std::vector<int> parameters;
  // Output node ids in flattened output order (an id may repeat).
  std::vector<int> outputs;
  // Nodes with effects, in creation order.
  std::vector<int> effects;

  // One line per node, then the outputs. Includes creation sites when `with_sites`.
  std::string to_string(bool with_sites = false) const;
  // Graphviz dot.
  std::string to_dot(const std::string& title = "fjit") const;
  // Checks SSA order, arities, and that each node's type equals what its shape rule infers.
  // Throws std::logic_error naming the node index, op and shapes.
  void verify() const;

 private:
  std::vector<Node> nodes_;
  absl::flat_hash_map<size_t, std::vector<int>> by_hash_;
};

size_t node_hash(const Node& n);
bool node_equal(const Node& a, const Node& b);

}  // namespace fjit
