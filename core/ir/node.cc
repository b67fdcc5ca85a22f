#include "core/ir/node.h"

#include <cstring>
#include <sstream>

#include "absl/hash/hash.h"
#include "core/ir/region.h"

namespace fjit {

std::string Site::str() const {
  if (!file) return "<unknown>";
  std::string f = file;
#ifdef FJIT_SOURCE_DIR
  const std::string root = std::string(FJIT_SOURCE_DIR) + "/";
  if (f.compare(0, root.size(), root) == 0) f = f.substr(root.size());
#endif
  return f + ":" + std::to_string(line);
}

bool Attrs::operator==(const Attrs& o) const {
  if (axes != o.axes || starts != o.starts || limits != o.limits || steps != o.steps || window != o.window ||
      axis != o.axis || index != o.index || keepdims != o.keepdims || trans_a != o.trans_a ||
      trans_b != o.trans_b || reverse != o.reverse || reduce != o.reduce || name != o.name || region != o.region)
    return false;
  // Bitwise comparison so that NaN constants compare equal to themselves and -0 != 0.
  if (std::memcmp(&scalar, &o.scalar, sizeof scalar) != 0) return false;
  if (value == o.value) return true;
  if (!value || !o.value) return false;
  return value->bit_equal(*o.value);
}

size_t Attrs::hash() const {
  uint64_t bits;
  std::memcpy(&bits, &scalar, sizeof bits);
  return absl::HashOf(axes, starts, limits, steps, window, axis, index, keepdims, trans_a, trans_b,
                      reverse, reduce, name, bits, value ? value->fingerprint() : 0, region.get());
}

std::string Node::to_string(int id) const {
  std::ostringstream os;
  os << "%" << id << " = " << op_name(op) << " " << type_str(dtype, shape);
  for (size_t i = 0; i < inputs.size(); ++i) os << (i ? ", " : " ") << "%" << inputs[i];
  auto list = [&os](const char* key, const std::vector<int64_t>& v) {
    if (v.empty()) return;
    os << " " << key << "=[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    os << "]";
  };
  list("axes", attrs.axes);
  list("starts", attrs.starts);
  list("limits", attrs.limits);
  list("steps", attrs.steps);
  list("window", attrs.window);
  switch (op) {
    case Op::Concat: case Op::Gather: case Op::ScatterAdd: case Op::ArgMax: case Op::Iota:
    case Op::Cumsum:
    case Op::SoftmaxXent: case Op::SoftmaxXentGrad:
      os << " axis=" << attrs.axis;
      break;
    case Op::TopK: os << " k=" << attrs.index; break;
    case Op::MaxPoolGrad:
      if (attrs.index != 0) os << " relu_mask";
      break;
    case Op::Parameter:
      os << " #" << attrs.index;
      if (!attrs.name.empty()) os << " \"" << attrs.name << "\"";
      break;
    case Op::Check: os << " site=" << attrs.index; break;
    case Op::Scan: case Op::Cond: case Op::CustomVjp: case Op::WhileLoop: case Op::Remat:
      if (attrs.region)
        os << " {" << attrs.region->graphs.size() << " sub-graphs of "
           << attrs.region->graphs[0]->size() << " nodes, " << attrs.region->outputs.size()
           << " results" << (op == Op::Scan ? ", length " + std::to_string(attrs.region->length) : "")
           << (attrs.region->reverse ? ", reverse" : "") << "}";
      break;
    case Op::Output: os << " #" << attrs.index; break;
    case Op::Attention: case Op::AttentionGrad:
      os << (attrs.index ? " causal" : "") << " scale=" << attrs.scalar;
      break;
    case Op::AllReduce: case Op::AllGather: case Op::AxisIndex: case Op::ReduceScatter:
    case Op::AllToAll: case Op::Permute:
      os << " axis_name=\"" << attrs.name << "\"";
      if (!attrs.axes.empty()) {
        os << (op == Op::Permute ? " perm=[" : " shards=[");
        for (size_t i = 0; i < attrs.axes.size(); ++i) os << (i ? "," : "") << attrs.axes[i];
        os << "]";
      }
      break;
    case Op::Constant:
      if (attrs.value) os << " " << attrs.value->to_string(6);
      else os << " " << attrs.scalar;
      break;
    default: break;
  }
  if (attrs.keepdims) os << " keepdims";
  if (attrs.trans_a) os << " trans_a";
  if (attrs.trans_b) os << " trans_b";
  if (attrs.reverse) os << " reverse";
  return os.str();
}

bool node_has_effect(const Node& n) {
  return op_has_effect(n.op) || (n.attrs.region && n.attrs.region->has_effects && n.op != Op::Output);
}

}  // namespace fjit
