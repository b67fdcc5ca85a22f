// Copy groups (copy_group.h): every piece's positions, numbered one after another, split over
// the intra-op threads; each position moves one run.
#include "core/kernels/fused/copy_group.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/base/isa.h"
#include "core/kernels/elementwise/cast_bf16.h"
#include "core/kernels/split_work.h"
#include "core/kernels/strided_walk.h"

namespace fjit {
namespace {

using RoundFn = void (*)(const uint32_t*, uint16_t*, int64_t);

struct Plan {
  std::vector<CopyPiece> pieces;
  std::vector<int64_t> first;  // per piece, its first position; then the total
  RoundFn round = nullptr;
  int64_t es = 0;  // bytes per element of the result
};

// Moves the runs of positions [c0, c1) of piece p.
void move_runs(const Plan& P, const CopyPiece& p, const std::byte* x, std::byte* out, int64_t c0,
               int64_t c1) {
  const int64_t in_es = p.convert == CopyPiece::kToBf16 ? 4 : P.es, run = p.run;
  kernels::strided_walk(static_cast<int>(p.ext.size()), p.ext.data(), p.src.data(), p.dst.data(),
                        p.src_base, p.dst_base, c0, c1, [&](int64_t io, int64_t oo) {
    const std::byte* s = x + io * in_es;
    std::byte* d = out + oo * P.es;
    switch (p.convert) {
      case CopyPiece::kSame: std::memcpy(d, s, run * P.es); break;
      case CopyPiece::kToBf16:
        P.round(reinterpret_cast<const uint32_t*>(s), reinterpret_cast<uint16_t*>(d), run);
        break;
      case CopyPiece::kPlusZero: {
        const auto* a = reinterpret_cast<const float*>(s);
        auto* b = reinterpret_cast<float*>(d);
        for (int64_t j = 0; j < run; ++j) b[j] = a[j] + 0.0f;
        break;
      }
    }
  });
}

void run_copy_group(const Instr& in, const Frame& f) {
  const Plan& P = *static_cast<const Plan*>(in.prepared.get());
  const int64_t total = P.first.back();
  auto* out = in.output<std::byte>(f);
  kernels::split_work(total, 2 * in.out.size(), [&](int64_t c0, int64_t c1) {
    for (size_t k = 0; k < P.pieces.size(); ++k) {
      const int64_t lo = std::max(c0, P.first[k]), hi = std::min(c1, P.first[k + 1]);
      if (lo >= hi) continue;
      const CopyPiece& p = P.pieces[k];
      move_runs(P, p, in.in<std::byte>(f, p.operand), out, lo - P.first[k], hi - P.first[k]);
    }
  });
}

// The largest and smallest element a strided view touches, relative to its base.
void view_span(const CopyPiece& p, const std::vector<int64_t>& strides, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = p.run - 1;
  for (size_t k = 0; k < p.ext.size(); ++k) {
    const int64_t reach = (p.ext[k] - 1) * strides[k];
    (reach < 0 ? *lo : *hi) += reach;
  }
}

}  // namespace

bool select_copy_group(Instr& instr, std::vector<CopyPiece> pieces) {
  instr.fn = nullptr;
  auto P = std::make_shared<Plan>();
  P->es = dtype_size(instr.out.dtype);
  P->round = active_avx512_bf16() ? &kernels::ew::round_f32_to_bf16_avx512
                                  : &kernels::ew::round_f32_to_bf16_portable;
  int64_t covered = 0;
  P->first.push_back(0);
  for (CopyPiece& p : pieces) {
    if (p.operand < 0 || p.operand >= static_cast<int>(instr.ins.size()) || p.run < 1 ||
        p.ext.size() != p.src.size() || p.ext.size() != p.dst.size() ||
        p.ext.size() > static_cast<size_t>(kernels::kMaxWalkDims))
      return false;
    const ValueType& x = instr.ins[p.operand];
    const DType to = instr.out.dtype;
    const bool ok = p.convert == CopyPiece::kSame       ? x.dtype == to
                    : p.convert == CopyPiece::kToBf16   ? x.dtype == DType::f32 && to == DType::bf16
                                                        : x.dtype == DType::f32 && to == DType::f32;
    if (!ok) return false;
    int64_t lo, hi;
    view_span(p, p.src, &lo, &hi);
    if (p.src_base + lo < 0 || p.src_base + hi >= x.size()) return false;
    view_span(p, p.dst, &lo, &hi);
    if (p.dst_base + lo < 0 || p.dst_base + hi >= instr.out.size()) return false;
    const int64_t n = num_elements(p.ext);
    covered += n * p.run;
    P->first.push_back(P->first.back() + n);
  }
  // Disjointness is the planner's (each piece is a part of a concat, or the whole result);
  // the count at least rules out gaps when they are disjoint.
  if (covered != instr.out.size()) return false;
  P->pieces = std::move(pieces);
  instr.prepared = std::move(P);
  instr.fn = &run_copy_group;
  return true;
}

}  // namespace fjit
