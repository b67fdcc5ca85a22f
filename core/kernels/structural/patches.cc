// patches (im2col) and patches_adjoint (col2im) over NHWC images.
//
// The patches row of output pixel (n, oh, ow) is KH*KW runs of C contiguous channels, one per
// window tap: a tap inside the image is one memcpy of a channel run of x, a tap in the padding
// is a fill. The adjoint walks the same taps and adds each run into the image, in a fixed
// order (row by row, tap by tap), so its sums do not depend on anything but the shapes; where
// no two taps share a pixel (pooling windows) it writes each pixel once, 0 + its one tap.
#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstring>

#include "core/ir/convert.h"
#include "core/kernels/split_work.h"
#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/window_geometry.h"

namespace fjit::kernels::st {
namespace {

// Images are independent (a patches row reads one image; an image's pixels sum only its own
// rows' taps, in the same order), so both kernels split whole images over the intra-op
// threads and give the same bits on any thread count.
// A first layer's grey image (one channel): one element per tap, written in for_each_tap's
// order by loops that test the window row once per row and keep no call per tap.
template <class T> void grey_patches(const Geometry& g, const T* x, T* out, T pad, int64_t b0, int64_t b1) {
  T* o = out + b0 * g.patches_elems();
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t y = 0; y < g.oh; ++y)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t i = 0; i < g.kh; ++i, o += g.kw) {
          const int64_t iy = y * g.sh - g.top + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill_n(o, g.kw, pad);
            continue;
          }
          const T* row = x + (b * g.h + iy) * g.w;
          const int64_t ix0 = ox * g.sw - g.left;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t ix = ix0 + j * g.dw;
            o[j] = ix >= 0 && ix < g.w ? row[ix] : pad;
          }
        }
}

template <class T> void patches_images(const Geometry& g, const T* x, T* out, T pad, int64_t b0, int64_t b1) {
  if (g.c == 1) return grey_patches(g, x, out, pad, b0, b1);
  const size_t run = g.c * sizeof(T);
  if (run % 32 == 0) {  // whole 32-byte pieces: inline vector copies, not a memcpy call per tap
    g.for_each_tap(b0, b1, [&](int64_t row, int64_t src) {
      if (src < 0) {
        std::fill_n(out + row, g.c, pad);
        return;
      }
      auto* __restrict d = reinterpret_cast<std::byte*>(out + row);
      const auto* __restrict s = reinterpret_cast<const std::byte*>(x + src);
      for (size_t k = 0; k < run; k += 32) std::memcpy(d + k, s + k, 32);
    });
    return;
  }
  g.for_each_tap(b0, b1, [&](int64_t row, int64_t src) {
    if (src >= 0) std::memcpy(out + row, x + src, g.c * sizeof(T));
    else std::fill_n(out + row, g.c, pad);
  });
}

template <class T> void patches_kernel(const Instr& in, const Frame& f) {
  const Geometry g(in);
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  T pad;
  std::memcpy(&pad, &in.p[6], sizeof(T));
  split_work(g.n, g.n * (g.image_elems() + g.patches_elems()),
             [&](int64_t b0, int64_t b1) { patches_images(g, x, out, pad, b0, b1); });
}

template <class T> void adjoint_images(const Geometry& g, const T* cols, T* img, int64_t b0, int64_t b1) {
  T* const first = img + b0 * g.image_elems();
  const int64_t elems = (b1 - b0) * g.image_elems();
  if (g.disjoint()) {  // one tap at most per pixel (pooling windows): T(0) + run, no read of img
    if (!g.covers_image()) std::fill_n(first, elems, T(0));
    g.for_each_tap(b0, b1, [&](int64_t row, int64_t dst) {
      if (dst < 0) return;
      const T* __restrict s = cols + row;
      T* __restrict d = img + dst;
      for (int64_t k = 0; k < g.c; ++k) d[k] = T(0) + s[k];  // T(0) + s: as the sum below, -0 to +0
    });
    return;
  }
  std::fill_n(first, elems, T(0));
  g.for_each_tap(b0, b1, [&](int64_t row, int64_t dst) {
    if (dst < 0) return;
    const T* __restrict s = cols + row;
    T* __restrict d = img + dst;
    for (int64_t k = 0; k < g.c; ++k) d[k] += s[k];
  });
}

template <class T> void patches_adjoint_kernel(const Instr& in, const Frame& f) {
  const Geometry g(in);
  const T* cols = in.in<T>(f, 0);
  T* img = in.output<T>(f);
  split_work(g.n, g.n * (g.image_elems() + g.patches_elems()),
             [&](int64_t b0, int64_t b1) { adjoint_images(g, cols, img, b0, b1); });
}

void noop_kernel(const Instr&, const Frame&) {}

// patches of a 16-bit type with no arithmetic (bf16): the copy kernel on its bit patterns.
template <class Bits> KernelFn pick_copy(Instr& instr, Bits pad) {
  std::memcpy(&instr.p[6], &pad, sizeof(Bits));
  return &patches_kernel<Bits>;
}

template <class T> KernelFn pick(Instr& instr) {
  if (instr.op == Op::PatchesAdjoint) return &patches_adjoint_kernel<T>;
  const T pad = convert_element<T>(instr.attrs.scalar);
  std::memcpy(&instr.p[6], &pad, sizeof(T));
  return &patches_kernel<T>;
}

}  // namespace

bool select_patches(Instr& instr) {
  assert(instr.op == Op::Patches || instr.op == Op::PatchesAdjoint);
  const Shape& image = instr.op == Op::Patches ? instr.ins[0].shape : instr.out.shape;
  const Shape& cols = instr.op == Op::Patches ? instr.out.shape : instr.ins[0].shape;
  assert(image.size() == 4 && cols.size() == 4 && instr.attrs.window.size() == 10);
  store_geometry(instr, image, cols[1], cols[2]);
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  switch (instr.out.dtype) {
    case DType::f32: instr.fn = pick<float>(instr); return true;
    case DType::f64: instr.fn = pick<double>(instr); return true;
    case DType::i32: instr.fn = pick<int32_t>(instr); return true;
    case DType::bf16:  // the mixed-precision policy's patches (core/nn/conv.cc): copies only
      if (instr.op != Op::Patches) return false;
      instr.fn = pick_copy<uint16_t>(instr, convert_element<bf16_t>(instr.attrs.scalar).bits);
      return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
