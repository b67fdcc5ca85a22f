// Convolution products without their patches: op(A) = patches(x) or patches(x)^T, read from
// the image x by the packed GEMM's driver (packed_gemm.h) as it packs each block of op(A).
//
// A convolution's forward product is patches(x) [N*OH*OW, KH*KW*C] . W and its weight
// gradient patches(x)^T . g; the compiler (core/compile/passes/patches_products.cc) gives both
// the image instead of the patches. The driver then gathers each block of op(A) it packs from
// the image into a scratch block that stays in cache, and packs that: the packed panels hold
// the values the materialized patches would have given them, so every product has the bits
// of packed_sgemm over the patches, and the patches (KH*KW times the image) are never written
// out nor read back. The input gradient's product, the patches' cotangent, is likewise folded
// into the image a few images at a time as it is made, never written out whole. bf16 products
// (the mixed-precision policy's) gather whole blocks of patches rows into a buffer that stays in
// cache and multiply them there (patches_gemm_bf16.cc).
#pragma once

#include <cstdint>

#include "core/base/isa.h"
#include "core/kernels/kernel.h"

namespace fjit {

// The patches of an NHWC image under a window (core/ir/node.h's window attribute), as an
// operand: element (pixel, tap) of patches(x) [N*OH*OW, KH*KW*C], the taps ordered (window
// row, window column, channel), `pad` where a tap falls outside the image.
struct PatchesOperand {
  const float* x = nullptr;
  float pad = 0;
  // A bf16 image instead (block's bf16 form reads these; the f32 forms read x).
  const uint16_t* x_bf16 = nullptr;
  uint16_t pad_bf16 = 0;
  int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, top = 0, left = 0;

  int64_t pixels() const { return n * oh * ow; }
  int64_t taps() const { return kh * kw * c; }
  // dst[r * ldd + q] = patches(x)[r0 + r, c0 + q] for r < nr, q < nc (the block in range).
  void block(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst, int64_t ldd) const;
  // The same from x_bf16.
  void block(int64_t r0, int64_t nr, int64_t c0, int64_t nc, uint16_t* dst, int64_t ldd) const;
  // The same block transposed into slivers w columns wide, as the packed GEMM packs a
  // transposed A (gemm_packing.h's pack_along): column q of the block at dst[(q / w) * nr * w
  // + r * w + q % w], zero past nc up to a whole sliver. REQUIRES: w <= 16 (a kernel's MR).
  void slivers(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst, int64_t w) const;
};

// C [m, n] = op(A) op(B) as packed_sgemm computes it over the materialized patches, op(A) =
// patches(x) [m = pixels, k = taps] or, ta, patches(x)^T [m = taps, k = pixels]; B [k, n] (tb:
// [n, k]). The same bits as packed_sgemm(isa, ta, tb, ...) with A = the patches, for any thread
// count. REQUIRES: isa <= detected_isa(), m and k match the operand.
void packed_sgemm_patches(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          const PatchesOperand& a, const float* b, float* c, int threads);

// Prepares a MatMul made by the compiler's patches-products pass (attrs.window set), false for
// anything else:
//   attrs.index 0: operand 0 is an image, op(A) its patches (attrs.scalar the padding's value):
//     f32 on packed_sgemm_patches; bf16 (patches_gemm_bf16.cc) op(A) gathered a block of rows
//     at a time into a buffer that stays in cache and multiplied there, as the bf16 matmul op
//     (matmul_bf16.h) multiplies the materialized patches, with its bits;
//   attrs.index 1: the result is an image, patches_adjoint of the product g . op(W) (a
//     convolution's input gradient), which is made a few images at a time and folded into the
//     image while in cache: the bits of packed_sgemm and then patches_adjoint.
bool select_patches_matmul(Instr& instr);
// The geometry select_patches_matmul stores in instr.v (the image pointers and pads unset).
PatchesOperand patches_geometry(const Instr& instr);
// attrs.index 0's kernel on bf16 operands (patches_gemm_bf16.cc), with p[0] = M, p[1] = K,
// p[2] = N as select_patches_matmul sets them.
KernelFn bf16_patches_matmul_kernel(bool ta, bool tb);

}  // namespace fjit
