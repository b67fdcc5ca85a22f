// Convolution products without their patches (patches_gemm.h): the gather of a block of the
// patches from the image, and the MatMul kernel over an image operand.
#include "core/kernels/gemm/patches_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>

#include "core/base/threads.h"
#include "core/kernels/gemm/packed_gemm.h"

namespace fjit {
namespace {

// d[0, len) = s[0, len): whole 8-float vectors, then a masked tail (no library call per run).
inline void copy_run(const float* __restrict s, float* __restrict d, int64_t len) {
  int64_t q = 0;
  for (; q + 8 <= len; q += 8) _mm256_storeu_ps(d + q, _mm256_loadu_ps(s + q));
  if (q < len) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(len - q)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(d + q, mask, _mm256_maskload_ps(s + q, mask));
  }
}

}  // namespace

namespace {

// Calls emit(r, q, s, len) for the runs of patches(x)[r0 + r, c0 + q ...] (r < nr, q < nc), in
// order along each row: len values read from s, or the padding's value where s is null. A run
// is one window position's channels (one value where the image has one channel).
template <class Emit>
void walk(const PatchesOperand& o, int64_t r0, int64_t nr, int64_t c0, int64_t nc, Emit&& emit) {
  const int64_t per_image = o.oh * o.ow;
  int64_t b = r0 / per_image, y = (r0 % per_image) / o.ow, xo = r0 % o.ow;
  // Where column c0 falls: window row i0, column j0, channel cc0 (no division per tap below).
  const int64_t i0 = c0 / o.c / o.kw, j0 = c0 / o.c % o.kw, cc0 = c0 % o.c;
  for (int64_t r = 0; r < nr; ++r) {
    const float* image = o.x + b * o.h * o.w * o.c;
    const int64_t y0 = y * o.sh - o.top, x0 = xo * o.sw - o.left;
    int64_t i = i0, j = j0;
    for (int64_t q = 0, cc = cc0; q < nc; cc = 0) {
      const int64_t len = std::min(o.c - cc, nc - q);
      const int64_t iy = y0 + i * o.dh, ix = x0 + j * o.dw;
      const bool inside = iy >= 0 && iy < o.h && ix >= 0 && ix < o.w;
      emit(r, q, inside ? image + (iy * o.w + ix) * o.c + cc : nullptr, len);
      q += len;
      if (++j == o.kw) j = 0, ++i;
    }
    if (++xo == o.ow) {
      xo = 0;
      if (++y == o.oh) y = 0, ++b;
    }
  }
}

// A one-channel image's patches, value by value: put(r, q, value) for every element of the
// block in row-major order, the bounds tested only for windows that cross the image's edge.
template <class Put>
void walk_grey(const PatchesOperand& o, int64_t r0, int64_t nr, int64_t c0, int64_t nc, Put&& put) {
  const int64_t per_image = o.oh * o.ow;
  int64_t b = r0 / per_image, y = (r0 % per_image) / o.ow, xo = r0 % o.ow;
  const int64_t i0 = c0 / o.kw, j0 = c0 % o.kw;
  for (int64_t r = 0; r < nr; ++r) {
    const float* image = o.x + b * o.h * o.w;
    const int64_t y0 = y * o.sh - o.top, x0 = xo * o.sw - o.left;
    const bool inside =
        y0 >= 0 && y0 + (o.kh - 1) * o.dh < o.h && x0 >= 0 && x0 + (o.kw - 1) * o.dw < o.w;
    int64_t i = i0, j = j0;
    for (int64_t q = 0; q < nc; ++q) {
      const int64_t iy = y0 + i * o.dh, ix = x0 + j * o.dw;
      put(r, q,
          inside || (iy >= 0 && iy < o.h && ix >= 0 && ix < o.w) ? image[iy * o.w + ix] : o.pad);
      if (++j == o.kw) j = 0, ++i;
    }
    if (++xo == o.ow) {
      xo = 0;
      if (++y == o.oh) y = 0, ++b;
    }
  }
}

}  // namespace

void PatchesOperand::block(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst,
                           int64_t ldd) const {
  if (c == 1)
    return walk_grey(*this, r0, nr, c0, nc,
                     [&](int64_t r, int64_t q, float v) { dst[r * ldd + q] = v; });
  walk(*this, r0, nr, c0, nc, [&](int64_t r, int64_t q, const float* s, int64_t len) {
    float* d = dst + r * ldd + q;
    if (len == 1)
      *d = s ? *s : pad;
    else if (s)
      copy_run(s, d, len);
    else
      std::fill_n(d, len, pad);
  });
}

void PatchesOperand::slivers(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst,
                             int64_t w) const {
  const int64_t slab = nr * w;
  float* d = dst;  // where column q of row r goes, kept as the runs come in order
  int64_t at = 0;  // q % w
  if (c == 1) {
    walk_grey(*this, r0, nr, c0, nc, [&](int64_t r, int64_t q, float v) {
      if (q == 0) d = dst + r * w, at = 0;
      d[at] = v;
      if (++at == w) at = 0, d += slab;
    });
  } else {
    walk(*this, r0, nr, c0, nc, [&](int64_t r, int64_t q, const float* s, int64_t len) {
      if (q == 0) d = dst + r * w, at = 0;
      while (len > 0) {  // the run's pieces, one per sliver it crosses
        const int64_t piece = std::min(len, w - at);
        if (piece == 1)
          d[at] = s ? *s : pad;
        else if (s)
          copy_run(s, d + at, piece);
        else
          std::fill_n(d + at, piece, pad);
        len -= piece;
        if (s) s += piece;
        if ((at += piece) == w) at = 0, d += slab;
      }
    });
  }
  if (nc % w != 0) {  // the last sliver's columns past nc
    float* last = dst + (nc / w) * slab;
    for (int64_t r = 0; r < nr; ++r) std::fill(last + r * w + nc % w, last + (r + 1) * w, 0.f);
  }
}

namespace {

// p[0] = M, p[1] = K, p[2] = N, p[6] = the Isa; v = {N, H, W, C, OH, OW} then the window.
template <bool TA, bool TB>
void patches_matmul_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  const std::vector<int64_t>& v = in.v;
  PatchesOperand a;
  a.x = in.in<float>(f, 0);
  a.pad = static_cast<float>(in.attrs.scalar);
  a.n = v[0], a.h = v[1], a.w = v[2], a.c = v[3], a.oh = v[4], a.ow = v[5];
  a.kh = v[6], a.kw = v[7], a.sh = v[8], a.sw = v[9], a.dh = v[10], a.dw = v[11];
  a.top = v[12], a.left = v[14];
  // Threads as the packed GEMM's other entries: from a few million flops on.
  const int threads = 2 * m * n * k >= (int64_t{1} << 22) ? intra_op_threads() : 1;
  packed_sgemm_patches(static_cast<Isa>(in.p[6]), TA, TB, m, n, k, a, in.in<float>(f, 1),
                       in.output<float>(f), threads);
}

}  // namespace

bool select_patches_matmul(Instr& instr) {
  const Shape& x = instr.ins[0].shape;
  const Shape& bs = instr.ins[1].shape;
  const Shape& cs = instr.out.shape;
  const std::vector<int64_t>& win = instr.attrs.window;
  if (win.size() != 10 || x.size() != 4 || bs.size() != 2 || cs.size() != 2) return false;
  if (instr.out.dtype != DType::f32 || instr.ins[0].dtype != DType::f32 ||
      instr.ins[1].dtype != DType::f32)
    return false;
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  const int64_t oh = (x[1] + win[6] + win[7] - ((win[0] - 1) * win[4] + 1)) / win[2] + 1;
  const int64_t ow = (x[2] + win[8] + win[9] - ((win[1] - 1) * win[5] + 1)) / win[3] + 1;
  const int64_t pixels = x[0] * oh * ow, taps = win[0] * win[1] * x[3];
  const int64_t m = cs[0], n = cs[1], k = tb ? bs[1] : bs[0];
  if ((tb ? bs[0] : bs[1]) != n || m != (ta ? taps : pixels) || k != (ta ? pixels : taps))
    return false;
  instr.p[0] = m;
  instr.p[1] = k;
  instr.p[2] = n;
  instr.p[6] = static_cast<int64_t>(active_isa());
  instr.v = {x[0], x[1], x[2], x[3], oh, ow};
  instr.v.insert(instr.v.end(), win.begin(), win.end());
  if (ta)
    instr.fn = tb ? patches_matmul_kernel<true, true> : patches_matmul_kernel<true, false>;
  else
    instr.fn = tb ? patches_matmul_kernel<false, true> : patches_matmul_kernel<false, false>;
  return true;
}

}  // namespace fjit
