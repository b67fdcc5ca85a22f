// Convolution products without their patches (patches_gemm.h): the gather of a block of the
// patches from the image, and the MatMul kernel over an image operand.
#include "core/kernels/gemm/patches_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/ir/shape_rules.h"
#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/split_work.h"

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

// The same for bf16: whole 32-byte pieces inline, not a library call per run.
inline void copy_run(const uint16_t* __restrict s, uint16_t* __restrict d, int64_t len) {
  int64_t q = 0;
  for (; q + 16 <= len; q += 16) std::memcpy(d + q, s + q, 32);
  for (; q < len; ++q) d[q] = s[q];
}

// Calls emit(r, q, s, len) for the runs of patches(x)[r0 + r, c0 + q ...] (r < nr, q < nc), in
// order along each row: len values read from s, or the padding's value where s is null. A run
// is one window position's channels (one value where the image has one channel), or a whole
// window row's where that row lies inside the image undilated (its KW*C values are neighbours
// in the image).
template <class T, class Emit>
void walk(const PatchesOperand& o, const T* x, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
          Emit&& emit) {
  const int64_t per_image = o.oh * o.ow;
  int64_t b = r0 / per_image, y = (r0 % per_image) / o.ow, xo = r0 % o.ow;
  // Where column c0 falls: window row i0, column j0, channel cc0 (no division per tap below).
  const int64_t i0 = c0 / o.c / o.kw, j0 = c0 / o.c % o.kw, cc0 = c0 % o.c;
  for (int64_t r = 0; r < nr; ++r) {
    const T* image = x + b * o.h * o.w * o.c;
    const int64_t y0 = y * o.sh - o.top, x0 = xo * o.sw - o.left;
    int64_t i = i0, j = j0;
    const bool row_inside = o.dw == 1 && x0 >= 0 && x0 + o.kw <= o.w;  // every window column
    for (int64_t q = 0, cc = cc0; q < nc; cc = 0) {
      const int64_t iy = y0 + i * o.dh;
      if (row_inside && j == 0 && cc == 0 && nc - q >= o.kw * o.c && iy >= 0 && iy < o.h) {
        emit(r, q, image + (iy * o.w + x0) * o.c, o.kw * o.c);
        q += o.kw * o.c;
        ++i;
        continue;
      }
      const int64_t len = std::min(o.c - cc, nc - q);
      const int64_t ix = x0 + j * o.dw;
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
// block in row-major order. Each tap's offset is tabled once; the bounds are tested only for
// windows that cross the image's edge.
template <class T, class Put>
void walk_grey(const PatchesOperand& o, const T* x, T pad, int64_t r0, int64_t nr, int64_t c0,
               int64_t nc, Put&& put) {
  thread_local std::vector<int64_t> tab;  // per column q: the tap's row, column and offset
  if (static_cast<int64_t>(tab.size()) < 3 * nc) tab.resize(3 * nc);
  for (int64_t q = 0, i = c0 / o.kw, j = c0 % o.kw; q < nc; ++q) {
    tab[3 * q] = i * o.dh, tab[3 * q + 1] = j * o.dw, tab[3 * q + 2] = i * o.dh * o.w + j * o.dw;
    if (++j == o.kw) j = 0, ++i;
  }
  const int64_t* t = tab.data();
  const int64_t per_image = o.oh * o.ow;
  int64_t b = r0 / per_image, y = (r0 % per_image) / o.ow, xo = r0 % o.ow;
  for (int64_t r = 0; r < nr; ++r) {
    const T* image = x + b * o.h * o.w;
    const int64_t y0 = y * o.sh - o.top, x0 = xo * o.sw - o.left;
    if (y0 >= 0 && y0 + (o.kh - 1) * o.dh < o.h && x0 >= 0 && x0 + (o.kw - 1) * o.dw < o.w) {
      const T* at = image + y0 * o.w + x0;
      for (int64_t q = 0; q < nc; ++q) put(r, q, at[t[3 * q + 2]]);
    } else {
      for (int64_t q = 0; q < nc; ++q) {
        const int64_t iy = y0 + t[3 * q], ix = x0 + t[3 * q + 1];
        put(r, q, iy >= 0 && iy < o.h && ix >= 0 && ix < o.w ? image[iy * o.w + ix] : pad);
      }
    }
    if (++xo == o.ow) {
      xo = 0;
      if (++y == o.oh) y = 0, ++b;
    }
  }
}

// dst[r * ldd + q] = patches(x)[r0 + r, c0 + q] (PatchesOperand::block), for f32 or bf16 x.
template <class T>
void gather(const PatchesOperand& o, const T* x, T pad, int64_t r0, int64_t nr, int64_t c0,
            int64_t nc, T* dst, int64_t ldd) {
  if (o.c == 1)
    return walk_grey(o, x, pad, r0, nr, c0, nc,
                     [&](int64_t r, int64_t q, T v) { dst[r * ldd + q] = v; });
  walk(o, x, r0, nr, c0, nc, [&](int64_t r, int64_t q, const T* s, int64_t len) {
    T* d = dst + r * ldd + q;
    if (len == 1)
      *d = s ? *s : pad;
    else if (s)
      copy_run(s, d, len);
    else
      std::fill_n(d, len, pad);
  });
}

}  // namespace

void PatchesOperand::block(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst,
                           int64_t ldd) const {
  gather(*this, x, pad, r0, nr, c0, nc, dst, ldd);
}

void PatchesOperand::block(int64_t r0, int64_t nr, int64_t c0, int64_t nc, uint16_t* dst,
                           int64_t ldd) const {
  gather(*this, x_bf16, pad_bf16, r0, nr, c0, nc, dst, ldd);
}

// v = {N, H, W, C, OH, OW} then the window attribute.
PatchesOperand patches_geometry(const Instr& in) {
  const std::vector<int64_t>& v = in.v;
  PatchesOperand a;
  a.n = v[0], a.h = v[1], a.w = v[2], a.c = v[3], a.oh = v[4], a.ow = v[5];
  a.kh = v[6], a.kw = v[7], a.sh = v[8], a.sw = v[9], a.dh = v[10], a.dw = v[11];
  a.top = v[12], a.left = v[14];
  return a;
}

void PatchesOperand::slivers(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst,
                             int64_t w) const {
  const int64_t slab = nr * w;
  float* d = dst;  // where column q of row r goes, kept as the runs come in order
  int64_t at = 0;  // q % w
  if (c == 1) {
    thread_local std::vector<int64_t> place;  // where column q goes in row 0
    if (static_cast<int64_t>(place.size()) < nc) place.resize(nc);
    for (int64_t q = 0; q < nc; ++q) place[q] = (q / w) * slab + q % w;
    const int64_t* p = place.data();
    walk_grey(*this, x, pad, r0, nr, c0, nc,
              [&](int64_t r, int64_t q, float v) { dst[r * w + p[q]] = v; });
  } else {
    walk(*this, x, r0, nr, c0, nc, [&](int64_t r, int64_t q, const float* s, int64_t len) {
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
    // Masked stores of zero on lanes [nc % w, w) (w <= 16): a loop here becomes a memset call
    // per row.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_epi32(8);
    const __m256i from = _mm256_set1_epi32(static_cast<int>(nc % w) - 1);
    const __m256i to = _mm256_set1_epi32(static_cast<int>(w));
    const __m256i lo = _mm256_and_si256(_mm256_cmpgt_epi32(lane, from), _mm256_cmpgt_epi32(to, lane));
    const __m256i lane8 = _mm256_add_epi32(lane, eight);
    const __m256i hi = _mm256_and_si256(_mm256_cmpgt_epi32(lane8, from), _mm256_cmpgt_epi32(to, lane8));
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t r = 0; r < nr; ++r) {
      _mm256_maskstore_ps(last + r * w, lo, zero);
      if (w > 8) _mm256_maskstore_ps(last + r * w + 8, hi, zero);
    }
  }
}

namespace {

PatchesOperand geometry(const Instr& in, const float* x) {
  PatchesOperand a = patches_geometry(in);
  a.x = x;
  a.pad = static_cast<float>(in.attrs.scalar);
  return a;
}

// d[0, len) += s[0, len).
inline void add_run(const float* __restrict s, float* __restrict d, int64_t len) {
  for (int64_t q = 0; q < len; ++q) d[q] += s[q];
}

// The input gradient's patches cotangent is made and folded into the image a few images at a
// time, while it is in cache: at most this many bytes of it at once.
constexpr int64_t kChunkBytes = 512 << 10;

// attrs.index 1: out (an image) = patches_adjoint(g . op(W)) with g [pixels, K], the product
// [pixels, taps] (p[0] = pixels, p[1] = K, p[2] = taps, p[6] = the Isa). Per run of whole
// images: their rows of the product on packed_sgemm (each element's bits do not depend on which
// rows are computed together), then patches_adjoint's sums (core/kernels/structural/patches.cc)
// in its order: the images zeroed, every (pixel, tap) added in order of pixel, then tap.
// bf16 operands (the mixed-precision policy's products): the product on bf16_gemm_packed_b, op(W)
// packed once, as the bf16 matmul computes it on the AVX512_BF16 and AMX paths (bf16_gemm.h: a
// row's bits do not depend on the rows beside it).
template <bool TB, class T>
void input_grad_kernel(const Instr& in, const Frame& f) {
  const int64_t k = in.p[1], taps = in.p[2];
  float* img = in.output<float>(f);
  PatchesOperand o = geometry(in, img);
  const T* g = in.in<T>(f, 0);
  const T* w = in.in<T>(f, 1);
  const Isa isa = static_cast<Isa>(in.p[6]);
  const int64_t per_image = o.oh * o.ow, image_elems = o.h * o.w * o.c;
  const uint16_t* wp = nullptr;
  if constexpr (std::is_same_v<T, uint16_t>) {
    thread_local std::vector<uint16_t> packed;
    uint16_t* at = aligned_scratch(packed, bf16_packed_b_size(taps, k));
    bf16_pack_b(taps, k, w, TB ? k : taps, TB, at);
    wp = at;
  }
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / 4 / std::max<int64_t>(1, per_image * taps));
  // Past the step's deadline the runs left are skipped (core/base/step_deadline.h).
  const int64_t deadline = thread_step_deadline();
  kernels::split_work(o.n, o.n * (image_elems + per_image * (taps + k)), [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> cols;
    for (int64_t b = b0; b < b1 && !deadline_passed(deadline); b += chunk) {
      const int64_t be = std::min(b1, b + chunk), rows = (be - b) * per_image;
      if (static_cast<int64_t>(cols.size()) < rows * taps) cols.resize(rows * taps);
      if constexpr (std::is_same_v<T, uint16_t>)
        bf16_gemm_packed_b(rows, taps, k, g + b * per_image * k, k, false, wp, cols.data(), false);
      else
        packed_sgemm(isa, false, TB, rows, taps, k, g + b * per_image * k, w, cols.data(), false, 1);
      std::fill(img + b * image_elems, img + be * image_elems, 0.f);
      // The runs walk() finds in the image are where each tap's channels go.
      walk(o, o.x, b * per_image, rows, 0, taps,
           [&](int64_t r, int64_t q, const float* at, int64_t len) {
             if (at) add_run(cols.data() + r * taps + q, const_cast<float*>(at), len);
           });
    }
  });
}

// p[0] = M, p[1] = K, p[2] = N, p[6] = the Isa; v: geometry().
template <bool TA, bool TB>
void patches_matmul_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  const PatchesOperand a = geometry(in, in.in<float>(f, 0));
  // Threads as the packed GEMM's other entries: from a few million flops on.
  const int threads = 2 * m * n * k >= (int64_t{1} << 22) ? intra_op_threads() : 1;
  packed_sgemm_patches(static_cast<Isa>(in.p[6]), TA, TB, m, n, k, a, in.in<float>(f, 1),
                       in.output<float>(f), threads);
}

}  // namespace

namespace {

// Stores the image x's geometry as geometry() reads it (v = {N, H, W, C, OH, OW} then the
// window) and returns its patches' extents {pixels, taps}, from patches' shape rule.
std::array<int64_t, 2> store_image(Instr& instr, const Shape& x) {
  const ValueType image[1] = {{DType::f32, x}};
  const Shape cols = infer_type(Op::Patches, instr.attrs, image, image[0]).shape;
  instr.v = {x[0], x[1], x[2], x[3], cols[1], cols[2]};
  instr.v.insert(instr.v.end(), instr.attrs.window.begin(), instr.attrs.window.end());
  return {cols[0] * cols[1] * cols[2], cols[3]};
}

// attrs.index 1: ins[0] = g [pixels, K], ins[1] = W, out = the image (input_grad_kernel).
bool select_input_grad(Instr& instr) {
  const Shape& gs = instr.ins[0].shape;
  const Shape& bs = instr.ins[1].shape;
  const Shape& x = instr.out.shape;
  const std::vector<int64_t>& win = instr.attrs.window;
  if (win.size() != 10 || x.size() != 4 || gs.size() != 2 || bs.size() != 2) return false;
  const DType t = instr.ins[0].dtype;
  if (instr.attrs.trans_a || instr.out.dtype != DType::f32 || instr.ins[1].dtype != t ||
      (t != DType::f32 && !(t == DType::bf16 && active_avx512_bf16())))
    return false;
  const bool tb = instr.attrs.trans_b;
  const auto [pixels, taps] = store_image(instr, x);
  const int64_t k = gs[1];
  if (gs[0] != pixels || (tb ? bs[1] : bs[0]) != k || (tb ? bs[0] : bs[1]) != taps) return false;
  instr.p[0] = pixels;
  instr.p[1] = k;
  instr.p[2] = taps;
  instr.p[6] = static_cast<int64_t>(active_isa());
  if (t == DType::bf16)
    instr.fn = tb ? input_grad_kernel<true, uint16_t> : input_grad_kernel<false, uint16_t>;
  else
    instr.fn = tb ? input_grad_kernel<true, float> : input_grad_kernel<false, float>;
  return true;
}

}  // namespace

bool select_patches_matmul(Instr& instr) {
  if (instr.attrs.index == 1) return select_input_grad(instr);
  const Shape& x = instr.ins[0].shape;
  const Shape& bs = instr.ins[1].shape;
  const Shape& cs = instr.out.shape;
  const std::vector<int64_t>& win = instr.attrs.window;
  if (win.size() != 10 || x.size() != 4 || bs.size() != 2 || cs.size() != 2) return false;
  const DType t = instr.ins[0].dtype;
  if (instr.out.dtype != DType::f32 || (t != DType::f32 && t != DType::bf16) ||
      instr.ins[1].dtype != t)
    return false;
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  const auto [pixels, taps] = store_image(instr, x);
  const int64_t m = cs[0], n = cs[1], k = tb ? bs[1] : bs[0];
  if ((tb ? bs[0] : bs[1]) != n || m != (ta ? taps : pixels) || k != (ta ? pixels : taps))
    return false;
  instr.p[0] = m;
  instr.p[1] = k;
  instr.p[2] = n;
  instr.p[6] = static_cast<int64_t>(active_isa());
  if (t == DType::bf16)
    instr.fn = bf16_patches_matmul_kernel(ta, tb);
  else if (ta)
    instr.fn = tb ? patches_matmul_kernel<true, true> : patches_matmul_kernel<true, false>;
  else
    instr.fn = tb ? patches_matmul_kernel<false, true> : patches_matmul_kernel<false, false>;
  return true;
}

}  // namespace fjit
