// Convolution products read their image, not its patches.
//
// A convolution traces to matmul(reshape(patches(x)), W), and its weight gradient to
// matmul(reshape(patches(x)), g) with trans_a. Each such f32 product (and bf16 one, see
// image_product) becomes a matmul of the image itself, the patches' window (and padding value)
// in its attributes: matmul's shape rule reads operand 0 as that image's patches
// (core/ir/shape_rules.cc), and its kernel gathers each block of op(A) from the image as it
// packs it (core/kernels/gemm/patches_gemm.h), with the bits of the product over the patches.
// Once nothing else reads the patches they are dead code, and the image's KH*KW-fold copy is
// never written nor read back. With FJIT_GEMM=eigen (no packed GEMM) nothing changes.
//
// A convolution's input gradient traces to patches_adjoint(reshape(matmul(g, W, trans_b))):
// where the product is read there alone, the three become one matmul whose result is the
// image (attrs.index 1), made a few images at a time and folded into the image while in cache.
#include "core/base/isa.h"
#include "core/compile/passes/pass.h"
#include "core/kernels/gemm/matmul_bf16.h"
#include "core/kernels/gemm/packed_gemm.h"

namespace fjit {
namespace {

// Images of fewer channels keep their patches: each tap is then a run shorter than one vector,
// gathered value by value, and the patches (KH*KW copies of a thin image) are small beside the
// products' own traffic. Measured: bench/conv_products, the CNN's one-channel first layer.
constexpr int64_t kMinChannels = 8;

// Whether a product of `t` operands with n columns reads an image for its patches: f32, or
// bf16 on AVX512_BF16 without the AMX tiles (patches_gemm_bf16.cc; the AMX tiles keep the
// patches, as do products of at most kNarrowBf16 columns, which the bf16 matmul runs
// transposed).
bool image_product(DType t, int64_t n) {
  if (t == DType::f32) return true;
  return t == DType::bf16 && active_avx512_bf16() && !active_amx_bf16() &&
         n > kernels::st::kNarrowBf16;
}

class PatchesProducts : public Pass {
 public:
  const char* name() const override { return "patches-products"; }

  Graph run(const Graph& g) const override {
    const bool packed = packed_gemm_use() != PackedGemmUse::never;
    const std::vector<int> readers = reader_counts(g);
    return rewrite(g, [&](Graph& out, int old_id, Node n) {
      if (packed && n.op == Op::PatchesAdjoint && n.dtype == DType::f32 &&
          n.shape[3] >= kMinChannels) {
        // patches_adjoint(reshape(g . op(W))), the product read there alone: one matmul whose
        // result is the image (index 1).
        const int flat_id = g.node(old_id).inputs[0];
        const Node& flat = out.node(n.inputs[0]);
        if (flat.op == Op::Reshape && readers[flat_id] == 1 &&
            readers[g.node(flat_id).inputs[0]] == 1) {
          const Node& product = out.node(flat.inputs[0]);
          // f32 operands, or bf16 ones where the bf16 products run on AVX512_BF16 or AMX
          // (patches_gemm.h; the widening path keeps matmul_bf16.h's own kernel).
          const DType t = out.node(product.inputs[0]).dtype;
          if (product.op == Op::MatMul && product.dtype == DType::f32 &&
              (t == DType::f32 || (t == DType::bf16 && active_avx512_bf16())) &&
              out.node(product.inputs[1]).dtype == t &&
              product.attrs.window.empty() && !product.attrs.trans_a &&
              product.shape.size() == 2 && out.node(product.inputs[0]).shape.size() == 2 &&
              out.node(product.inputs[1]).shape.size() == 2 &&
              product.shape == Shape{flat.shape[0] * flat.shape[1] * flat.shape[2], flat.shape[3]}) {
            Node folded = product;
            folded.shape = n.shape;
            folded.attrs.window = n.attrs.window;
            folded.attrs.index = 1;
            folded.site = n.site;
            return out.add(std::move(folded));
          }
        }
      }
      if (packed && n.op == Op::MatMul && n.dtype == DType::f32 && n.attrs.window.empty() &&
          n.shape.size() == 2 && out.node(n.inputs[1]).shape.size() == 2 &&
          image_product(out.node(n.inputs[1]).dtype, n.shape[1])) {
        const Node& flat = out.node(n.inputs[0]);
        const Node& cols = flat.op == Op::Reshape ? out.node(flat.inputs[0]) : flat;
        if (flat.op == Op::Reshape && cols.op == Op::Patches &&
            cols.dtype == out.node(n.inputs[1]).dtype &&
            out.node(cols.inputs[0]).shape[3] >= kMinChannels &&
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
