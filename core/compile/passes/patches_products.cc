// Convolution products read their image, not its patches.
//
// A convolution traces to matmul(reshape(patches(x)), W), and its weight gradient to
// matmul(reshape(patches(x)), g) with trans_a. Each such f32 product becomes a matmul of the
// image itself, the patches' window (and padding value) in its attributes: matmul's shape rule
// reads operand 0 as that image's patches (core/ir/shape_rules.cc), and its kernel gathers each
// block of op(A) from the image as it packs it (core/kernels/gemm/patches_gemm.h), with the bits
// of the packed GEMM over the patches. Once nothing else reads the patches they are dead code,
// and the image's KH*KW-fold copy is never written nor read back. With FJIT_GEMM=eigen (no
// packed GEMM) nothing changes.
#include "core/compile/passes/pass.h"
#include "core/kernels/gemm/packed_gemm.h"

namespace fjit {
namespace {

class PatchesProducts : public Pass {
 public:
  const char* name() const override { return "patches-products"; }

  Graph run(const Graph& g) const override {
    const bool packed = packed_gemm_use() != PackedGemmUse::never;
    return rewrite(g, [&](Graph& out, int, Node n) {
      if (packed && n.op == Op::MatMul && n.dtype == DType::f32 && n.attrs.window.empty() &&
          n.shape.size() == 2 && out.node(n.inputs[1]).shape.size() == 2) {
        const Node& flat = out.node(n.inputs[0]);
        const Node& cols = flat.op == Op::Reshape ? out.node(flat.inputs[0]) : flat;
        if (flat.op == Op::Reshape && cols.op == Op::Patches && cols.dtype == DType::f32 &&
            flat.shape == Shape{cols.shape[0] * cols.shape[1] * cols.shape[2], cols.shape[3]}) {
          n.inputs[0] = cols.inputs[0];
          n.attrs.window = cols.attrs.window;
          n.attrs.scalar = cols.attrs.scalar;
        }
      }
      return out.add(std::move(n));
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_patches_products() { return std::make_unique<PatchesProducts>(); }

}  // namespace fjit
