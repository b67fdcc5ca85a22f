// Counter-based random bits (Philox4x32-10, core/kernels/random/philox.h) and their conversion to
// floats in [0, 1).
//
// Every output is a pure function of (key, its index, the op), so the bits do not depend on
// thread counts, replicas or the order anything runs in. The counter blocks:
//   random_bits  element i is word i % 4 of block (lo32(i / 4), hi32(i / 4), domain, 0), with
//                domain 0 for bits and 1 for split (attrs.index)
//   fold_in      words 0 and 1 of block (data, 0, 2, 0)
#include <algorithm>

#include "core/kernels/random/philox.h"
#include "core/kernels/split_work.h"
#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

// p[0] = elements, p[1] = domain.
void random_bits_kernel(const Instr& in, const Frame& f) {
  const uint32_t* key = in.in<uint32_t>(f, 0);
  uint32_t* out = in.output<uint32_t>(f);
  const int64_t n = in.p[0];
  const uint32_t domain = static_cast<uint32_t>(in.p[1]);
  // Each block of 4 words is its counter's philox value alone, so pieces of kPiece words
  // split over the intra-op threads give the same bits on any thread count. Ten rounds per
  // block: counted as kRoundsWork element-passes of a memory-bound kernel.
  constexpr int64_t kPiece = 4096, kRoundsWork = 16;
  split_work((n + kPiece - 1) / kPiece, n * kRoundsWork, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo * kPiece, end = std::min(n, hi * kPiece); i < end; i += 4) {
      const uint64_t block = static_cast<uint64_t>(i / 4);
      const auto c = philox4x32_10(
          {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), domain, 0},
          {key[0], key[1]});
      for (int64_t k = 0; k < 4 && i + k < end; ++k) out[i + k] = c[k];
    }
  });
}

void fold_in_kernel(const Instr& in, const Frame& f) {
  const uint32_t* key = in.in<uint32_t>(f, 0);
  uint32_t data;
  std::memcpy(&data, f.bufs[in.in_bufs[1]], sizeof data);  // i32 or u32: the same bits
  const auto c = philox4x32_10({data, 0, 2, 0}, {key[0], key[1]});
  uint32_t* out = in.output<uint32_t>(f);
  out[0] = c[0];
  out[1] = c[1];
}

// The top 24 bits as a multiple of 2^-24 (every value exact in f32), or all 32 bits as a
// multiple of 2^-32 in f64: uniform on [0, 1), never 1.
template <class T> void unit_kernel(const Instr& in, const Frame& f) {
  const uint32_t* bits = in.in<uint32_t>(f, 0);
  T* out = in.output<T>(f);
  for (int64_t i = 0, n = in.p[0]; i < n; ++i) {
    if constexpr (sizeof(T) == 4) out[i] = static_cast<T>(bits[i] >> 8) * T(0x1p-24);
    else out[i] = static_cast<T>(bits[i]) * T(0x1p-32);
  }
}

void noop_kernel(const Instr&, const Frame&) {}

}  // namespace

bool select_random(Instr& instr) {
  instr.p[0] = instr.out.size();
  instr.p[1] = instr.attrs.index;
  switch (instr.op) {
    case Op::RandomBits: instr.fn = instr.out.size() ? random_bits_kernel : noop_kernel; return true;
    case Op::FoldIn: instr.fn = fold_in_kernel; return true;
    case Op::RandomUnit:
      if (instr.out.size() == 0) instr.fn = noop_kernel;
      else if (instr.out.dtype == DType::f32) instr.fn = unit_kernel<float>;
      else if (instr.out.dtype == DType::f64) instr.fn = unit_kernel<double>;
      else return false;
      return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
