#include "core/ir/graph.h"

#include <sstream>
#include <stdexcept>

#include "absl/hash/hash.h"
#include "core/ir/shape_rules.h"

namespace fjit {

size_t node_hash(const Node& n) {
  return absl::HashOf(static_cast<int>(n.op), static_cast<int>(n.dtype), n.shape, n.inputs,
                      n.attrs.hash());
}

bool node_equal(const Node& a, const Node& b) {
  return a.op == b.op && a.dtype == b.dtype && a.shape == b.shape && a.inputs == b.inputs &&
         a.attrs == b.attrs;
}

int Graph::add(Node n) {
  for (int in : n.inputs)
    if (in < 0 || in >= size())
      throw std::logic_error("Graph::add: " + std::string(op_name(n.op)) + " input %" +
                             std::to_string(in) + " is not in the graph");
  const size_t h = node_hash(n);
  std::vector<int>& bucket = by_hash_[h];
  // Parameters are distinct by their index, effects by their unique attribute.
  for (int id : bucket)
    if (node_equal(nodes_[id], n)) return id;
  const int id = size();
  if (node_has_effect(n)) effects.push_back(id);
  nodes_.push_back(std::move(n));
  bucket.push_back(id);
  return id;
}

std::string Graph::to_string(bool with_sites) const {
  std::ostringstream os;
  for (int i = 0; i < size(); ++i) {
    os << nodes_[i].to_string(i);
    if (with_sites && nodes_[i].site.known()) os << "  @ " << nodes_[i].site.str();
    os << "\n";
  }
  os << "outputs:";
  for (int o : outputs) os << " %" << o;
  os << "\n";
  return os.str();
}

std::string Graph::to_dot(const std::string& title) const {
  std::ostringstream os;
  os << "digraph \"" << title << "\" {\n  rankdir=TB;\n  node [shape=box, fontname=monospace];\n";
  for (int i = 0; i < size(); ++i) {
    const Node& n = nodes_[i];
    const char* color = n.op == Op::Parameter ? "lightblue"
                        : n.op == Op::Constant ? "lightgray"
                        : n.op == Op::Check    ? "salmon"
                        : op_kind(n.op) == OpKind::kCollective ? "gold" : "white";
    os << "  n" << i << " [label=\"%" << i << " " << op_name(n.op) << "\\n"
       << type_str(n.dtype, n.shape) << "\", style=filled, fillcolor=" << color << "];\n";
    for (int in : n.inputs) os << "  n" << in << " -> n" << i << ";\n";
  }
  for (size_t k = 0; k < outputs.size(); ++k)
    os << "  out" << k << " [label=\"output " << k << "\", shape=ellipse];\n  n" << outputs[k]
       << " -> out" << k << ";\n";
  os << "}\n";
  return os.str();
}

void Graph::verify() const {
  auto fail = [this](int id, const std::string& what) {
    throw std::logic_error("graph verifier: node " + nodes_[id].to_string(id) + ": " + what);
  };
  for (int i = 0; i < size(); ++i) {
    const Node& n = nodes_[i];
    const int arity = op_arity(n.op);
    if (arity >= 0 && static_cast<int>(n.inputs.size()) != arity)
      fail(i, "expected " + std::to_string(arity) + " inputs");
    std::vector<ValueType> ins;
    for (int in : n.inputs) {
      if (in < 0 || in >= i) fail(i, "input %" + std::to_string(in) + " breaks SSA order");
      ins.push_back({nodes_[in].dtype, nodes_[in].shape});
    }
    ValueType t;
    try {
      t = infer_type(n.op, n.attrs, ins, ValueType{n.dtype, n.shape});
    } catch (const ShapeRuleError& e) {
      fail(i, e.what());
    }
    if (t.dtype != n.dtype || t.shape != n.shape)
      fail(i, "shape rule infers " + type_str(t.dtype, t.shape));
  }
  for (int o : outputs)
    if (o < 0 || o >= size()) throw std::logic_error("graph verifier: bad output id");
}

}  // namespace fjit
