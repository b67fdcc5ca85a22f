// max_pool and max_pool_grad over NHWC images (core/trace/patches.h), one pass each.
//
// Both walk each output pixel's window taps in patches' order (kh, then kw), on runs of C
// contiguous channels, and never materialize the windows. The forward keeps, per channel, the
// running max with reduce_max's rule (a NaN wins; of equal values the first stays). The
// backward recomputes each window's max, counts the elements equal to it (padding too when the
// max is -inf), and adds mask * (ct / count) into each tap's pixel in the same order as
// patches_adjoint: each pixel gets the bits reduce_max's rule over patches followed by
// patches_adjoint gives. Images are independent, so both split whole images over the intra-op
// threads and give the same bits on any thread count.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/kernels/split_work.h"
#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/window_geometry.h"

namespace fjit::kernels::st {
namespace {

// Channels handled together by the backward's per-window scratch (on the stack).
constexpr int64_t kChannelBlock = 256;

template <class T> constexpr T lowest() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}

// reduce_max's combine (core/kernels/structural/reduce.cc): b replaces a when larger or NaN.
template <class T> inline T take_max(T a, T b) { return ((b > a) | (b != b)) ? b : a; }

// Calls tap(image_offset) for each tap of output pixel (b, y, x) inside the image, in order,
// and returns how many taps fell in the padding.
template <class Tap> int64_t for_each_inside(const Geometry& g, int64_t b, int64_t y, int64_t x, Tap&& tap) {
  int64_t outside = 0;
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t iy = y * g.sh - g.top + i * g.dh;
    if (iy < 0 || iy >= g.h) {
      outside += g.kw;
      continue;
    }
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t ix = x * g.sw - g.left + j * g.dw;
      if (ix < 0 || ix >= g.w) {
        ++outside;
        continue;
      }
      tap(((b * g.h + iy) * g.w + ix) * g.c);
    }
  }
  return outside;
}

template <class T> void max_pool_images(const Geometry& g, const T* x, T* out, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t y = 0; y < g.oh; ++y)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T* __restrict o = out + ((b * g.oh + y) * g.ow + ox) * g.c;
        std::fill_n(o, g.c, lowest<T>());
        for_each_inside(g, b, y, ox, [&](int64_t src) {
          const T* __restrict s = x + src;
          for (int64_t k = 0; k < g.c; ++k) o[k] = take_max(o[k], s[k]);
        });
      }
}

template <class T> void max_pool_kernel(const Instr& in, const Frame& f) {
  const Geometry g(in);
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  split_work(g.n, g.n * (g.image_elems() + g.oh * g.ow * g.c),
             [&](int64_t b0, int64_t b1) { max_pool_images(g, x, out, b0, b1); });
}

// keep ? d : +0, as a bit mask: GCC vectorizes it, where it leaves `keep ? d : T(0)` beside the
// arithmetic that makes d as a branch (a float operation it may not execute unconditionally).
template <class T> inline T keep_if(bool keep, T d) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  return std::bit_cast<T>(static_cast<Bits>(std::bit_cast<Bits>(d) & (keep ? ~Bits{0} : Bits{0})));
}

// A disjoint 2x2 window wholly inside the image, over channels [0, c): the generic loops'
// arithmetic (the max in tap order, the count of equal taps, ct / count, T(0) + mask * share,
// then ReLU's select) in one pass per channel, kept in registers. a, b: the window's top row
// in x (the two taps' channel runs are c apart), e, f: its bottom row; da, db, de, df the same
// pixels of dx.
template <class T>
void two_by_two_window(const T* __restrict a, const T* __restrict b, const T* __restrict e,
                       const T* __restrict f, T* __restrict da, T* __restrict db,
                       T* __restrict de, T* __restrict df, const T* __restrict gr, int64_t c,
                       bool relu_mask) {
  const T lo = lowest<T>();
  for (int64_t k = 0; k < c; ++k) {
    const T v0 = a[k], v1 = b[k], v2 = e[k], v3 = f[k];
    const T m = take_max(take_max(take_max(take_max(lo, v0), v1), v2), v3);
    const T h0 = v0 == m ? T(1) : T(0), h1 = v1 == m ? T(1) : T(0);
    const T h2 = v2 == m ? T(1) : T(0), h3 = v3 == m ? T(1) : T(0);
    const T share = gr[k] / (h0 + h1 + h2 + h3);  // whole numbers: exact in any order
    const T d0 = T(0) + h0 * share, d1 = T(0) + h1 * share;
    const T d2 = T(0) + h2 * share, d3 = T(0) + h3 * share;
    const bool all = !relu_mask;
    da[k] = keep_if(all | (v0 > T(0)), d0);
    db[k] = keep_if(all | (v1 > T(0)), d1);
    de[k] = keep_if(all | (v2 > T(0)), d2);
    df[k] = keep_if(all | (v3 > T(0)), d3);
  }
}

// relu_mask: the result is kept only where x > 0, +0 elsewhere (max_pool_grad's attrs.index 1,
// relu_pool_grad.cc): a select of each pixel's value as it would be stored.
template <class T>
void max_pool_grad_images(const Geometry& g, const T* ct, const T* x, T* dx, bool relu_mask,
                          int64_t b0, int64_t b1) {
  const bool disjoint = g.disjoint();
  if (!disjoint || !g.covers_image())
    std::fill_n(dx + b0 * g.image_elems(), (b1 - b0) * g.image_elems(), T(0));
  T m[kChannelBlock], q[kChannelBlock];
  const bool two_by_two = disjoint && g.kh == 2 && g.kw == 2;
  const bool all = !relu_mask;  // every pixel's value kept
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t y = 0; y < g.oh; ++y)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        if (two_by_two) {  // a 2x2 pooling window wholly inside the image
          const int64_t iy = y * g.sh - g.top, ix = ox * g.sw - g.left;
          if (iy >= 0 && iy + 1 < g.h && ix >= 0 && ix + 1 < g.w) {
            const int64_t at = ((b * g.h + iy) * g.w + ix) * g.c, row = g.w * g.c;
            two_by_two_window(x + at, x + at + g.c, x + at + row, x + at + row + g.c, dx + at,
                              dx + at + g.c, dx + at + row, dx + at + row + g.c,
                              ct + ((b * g.oh + y) * g.ow + ox) * g.c, g.c, relu_mask);
            continue;
          }
        }
        for (int64_t c0 = 0; c0 < g.c; c0 += kChannelBlock) {
          const int64_t cn = std::min(kChannelBlock, g.c - c0);
          std::fill_n(m, cn, lowest<T>());
          const int64_t outside = for_each_inside(g, b, y, ox, [&](int64_t src) {
            const T* __restrict s = x + src + c0;
            for (int64_t k = 0; k < cn; ++k) m[k] = take_max(m[k], s[k]);
          });
          // The count of elements equal to the max (padding reads -inf), kept in q until the
          // division by it: whole numbers, exact in any order.
          const T pads = static_cast<T>(outside);
          for (int64_t k = 0; k < cn; ++k) q[k] = m[k] == lowest<T>() ? pads : T(0);
          for_each_inside(g, b, y, ox, [&](int64_t src) {
            const T* __restrict s = x + src + c0;
            for (int64_t k = 0; k < cn; ++k) q[k] += s[k] == m[k] ? T(1) : T(0);
          });
          const T* __restrict gr = ct + ((b * g.oh + y) * g.ow + ox) * g.c + c0;
          for (int64_t k = 0; k < cn; ++k) q[k] = gr[k] / q[k];
          for_each_inside(g, b, y, ox, [&](int64_t dst) {
            const T* __restrict s = x + dst + c0;
            T* __restrict d = dx + dst + c0;
            if (!disjoint)
              for (int64_t k = 0; k < cn; ++k) d[k] += (s[k] == m[k] ? T(1) : T(0)) * q[k];
            else  // T(0) + v: patches_adjoint's sum of one tap, -0 to +0
              for (int64_t k = 0; k < cn; ++k)
                d[k] = keep_if(all | (s[k] > T(0)), T(0) + (s[k] == m[k] ? T(1) : T(0)) * q[k]);
          });
        }
      }
    if (relu_mask && !disjoint) {  // the image's sums are complete: mask them
      const T* __restrict s = x + b * g.image_elems();
      T* __restrict d = dx + b * g.image_elems();
      for (int64_t i = 0; i < g.image_elems(); ++i) d[i] = keep_if(s[i] > T(0), d[i]);
    }
  }
}

template <class T> void max_pool_grad_kernel(const Instr& in, const Frame& f) {
  const Geometry g(in);
  const T* ct = in.in<T>(f, 0);
  const T* x = in.in<T>(f, 1);
  T* dx = in.output<T>(f);
  const bool relu_mask = in.p[6] != 0;
  split_work(g.n, g.n * (2 * g.image_elems() + g.oh * g.ow * g.c), [&](int64_t b0, int64_t b1) {
    max_pool_grad_images(g, ct, x, dx, relu_mask, b0, b1);
  });
}

void noop_kernel(const Instr&, const Frame&) {}

template <class T> KernelFn pick(Op op) {
  return op == Op::MaxPool ? &max_pool_kernel<T> : &max_pool_grad_kernel<T>;
}

}  // namespace

bool select_max_pool(Instr& instr) {
  assert(instr.op == Op::MaxPool || instr.op == Op::MaxPoolGrad);
  const Shape& image = instr.op == Op::MaxPool ? instr.ins[0].shape : instr.out.shape;
  const Shape& pooled = instr.op == Op::MaxPool ? instr.out.shape : instr.ins[0].shape;
  assert(image.size() == 4 && pooled.size() == 4 && instr.attrs.window.size() == 10);
  store_geometry(instr, image, pooled[1], pooled[2]);
  instr.p[6] = instr.op == Op::MaxPoolGrad && instr.attrs.index != 0;
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  switch (instr.out.dtype) {
    case DType::f32: instr.fn = pick<float>(instr.op); return true;
    case DType::f64: instr.fn = pick<double>(instr.op); return true;
    case DType::i32:
      if (instr.op != Op::MaxPool) return false;
      instr.fn = &max_pool_kernel<int32_t>;
      return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
