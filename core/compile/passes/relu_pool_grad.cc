// ReLU before max pooling, in the backward pass: the pool's gradient and ReLU's rule in one op.
//
// A convolution block's y = max_pool(relu(z)) differentiates to
//   select(gt(y', 0), max_pool_grad(ct, y'), 0)      with y' = relu(z), the pool's image
// (relu's rule reads its output). When max_pool_grad is read by that select alone, the pair
// becomes one max_pool_grad whose attrs.index is 1: the kernel writes each pixel's gradient
// only where y' > 0 and +0 elsewhere (core/ir/ops.def). The same bits: the select keeps the
// value where the compare holds and takes the +0 fill elsewhere, which is what the kernel
// writes; the image-sized value between them is never stored, nor read back.
#include "core/compile/passes/pass.h"

namespace fjit {
namespace {

// A scalar +0 constant: relu's rule compares with it and selects it.
bool is_plus_zero(const Node& n) { return is_plus_zero_fill(n) && n.shape.empty(); }

class ReluPoolGrad : public Pass {
 public:
  const char* name() const override { return "relu-pool-grad"; }

  Graph run(const Graph& g) const override {
    const std::vector<int> readers = reader_counts(g);
    return rewrite(g, [&](Graph& out, int old_id, Node n) {
      if (n.op == Op::Select && readers[g.node(old_id).inputs[1]] == 1) {
        const Node& cond = out.node(n.inputs[0]);
        const Node& grad = out.node(n.inputs[1]);
        if (grad.op == Op::MaxPoolGrad && grad.attrs.index == 0 && grad.shape == n.shape &&
            grad.dtype == n.dtype && is_plus_zero(out.node(n.inputs[2])) && cond.op == Op::Gt &&
            cond.inputs[0] == grad.inputs[1] && is_plus_zero(out.node(cond.inputs[1]))) {
          Node fused = grad;
          fused.attrs.index = 1;
          return out.add(std::move(fused));
        }
      }
      return out.add(std::move(n));
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_relu_pool_grad() { return std::make_unique<ReluPoolGrad>(); }

}  // namespace fjit
