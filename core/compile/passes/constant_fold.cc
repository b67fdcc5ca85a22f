// Constant folding: a pure node whose inputs are all constants becomes a constant, evaluated
// with the reference kernels. Broadcasts and reshapes of a filled constant stay fills (no
// data), so folding never materializes large arrays.
#include <cstring>

#include "core/kernels/kernel.h"
#include "core/compile/passes/pass.h"

namespace fjit {
namespace {

bool is_fill(const Node& n) { return n.op == Op::Constant && !n.attrs.value; }

Array materialize(const Node& n) {
  if (n.attrs.value) return *n.attrs.value;
  return Array::full(n.dtype, n.shape, n.attrs.scalar);
}

class ConstantFolding : public Pass {
 public:
  explicit ConstantFolding(int64_t max_elements) : max_elements_(max_elements) {}
  const char* name() const override { return "constant-folding"; }

  Graph run(const Graph& g) const override {
    return rewrite(g, [this](Graph& out, int, Node n) {
      if (n.op == Op::Constant || n.op == Op::Parameter || op_has_effect(n.op) ||
          op_kind(n.op) == OpKind::kControl)
        return out.add(std::move(n));
      bool all_const = true;
      for (int in : n.inputs) all_const = all_const && out.node(in).op == Op::Constant;
      if (!all_const) return out.add(std::move(n));
      // Layout ops on a fill keep it a fill of the new shape.
      if ((n.op == Op::BroadcastTo || n.op == Op::Reshape) && is_fill(out.node(n.inputs[0]))) {
        Node c{Op::Constant, n.dtype, n.shape, {}, {}, n.site};
        c.attrs.scalar = out.node(n.inputs[0]).attrs.scalar;
        return out.add(std::move(c));
      }
      if (n.size() > max_elements_) return out.add(std::move(n));
      for (int in : n.inputs)
        if (out.node(in).size() > max_elements_) return out.add(std::move(n));
      std::vector<Array> ins;
      for (int in : n.inputs) ins.push_back(materialize(out.node(in)));
      Array v = reference_eval(n.op, n.attrs, ValueType{n.dtype, n.shape}, ins);
      Node c{Op::Constant, n.dtype, n.shape, {}, {}, n.site};
      // A result whose elements are all equal is kept as a fill: no data to store.
      bool uniform = v.size() > 0;
      const size_t esize = dtype_size(v.dtype());
      const auto* bytes = static_cast<const unsigned char*>(v.raw());
      for (int64_t i = 1; i < v.size() && uniform; ++i)
        uniform = std::memcmp(bytes, bytes + i * esize, esize) == 0;
      if (uniform) c.attrs.scalar = v.at_as_double(0);
      else c.attrs.value = std::make_shared<const Array>(std::move(v));
      return out.add(std::move(c));
    });
  }

 private:
  int64_t max_elements_;
};
}  // namespace

std::unique_ptr<Pass> make_constant_folding(int64_t max_folded_elements) {
  return std::make_unique<ConstantFolding>(max_folded_elements);
}

}  // namespace fjit
