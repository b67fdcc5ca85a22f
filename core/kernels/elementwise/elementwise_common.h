// Internal to the fast elementwise kernels (core/kernels/elementwise*.cc): the broadcast
// plan that select time stores into an Instr, the loop that walks it at run time, and the
// operand adaptors the row kernels are written with.
//
// Every broadcasting kernel is "for each innermost row: row kernel". The plan collapses the
// output shape first (drops extent-1 dims, merges dims every operand walks the same way), so
// the common cases need no N-d loop at all:
//   same shape, or one operand of size 1    -> rank 1: one row over the whole output
//   [M,N] op [N] or [1,N] (row broadcast)    -> rank 2, operand 1 has outer stride 0
//   [M,N] op [M,1] (column broadcast)        -> rank 2, operand 1 inner stride 0 (a scalar per row)
//   anything else ([2,1,4] op [3,1], ...)    -> rank >= 3
// and one loop walks them all: rows in order, an odometer advancing each operand's offset.
// The innermost stride of every operand is 0 (broadcast) or 1 (contiguous); which one is a
// template parameter of the row kernel, chosen at select time from plan_broadcast()'s mask.
//
// Kernels may run in place: the output may alias an operand of the same shape and element
// size (never a broadcast one), so every row kernel reads element i before writing element i
// and makes a single pass.
#pragma once

#include "core/base/eigen.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/kernels/kernel.h"
#include "core/kernels/split_work.h"

namespace fjit::kernels::ew {

// Fills instr.p / instr.v with the collapsed broadcast plan of instr.out against instr.ins:
//   p[0] = r >= 1, the collapsed rank      p[1] = number of operands
//   p[2] = number of rows (product of the r-1 outer extents)
//   v[0, r)              collapsed output extents (v[r-1] is the row length)
//   v[r + k*r + d]       operand k's stride in elements along collapsed dim d
// REQUIRES: out.size() > 0 and every operand broadcasts to out.shape.
// Returns a mask with bit k set when operand k is contiguous (stride 1) along the row.
int plan_broadcast(Instr& instr);

// An output with collapsed rank r has at least 2^r elements, so this bound is never reached
// by a buffer that fits in memory; plan_broadcast() rejects more.
inline constexpr int kMaxCollapsedRank = 40;

// Calls row(out_offset, in_offsets, n) for rows [lo, hi) of instr's plan, in order.
template <int K, class Row>
inline void for_rows(const Instr& instr, int64_t lo, int64_t hi, Row& row) {
  const int r = static_cast<int>(instr.p[0]);
  const int64_t* ext = instr.v.data();
  const int64_t* st = ext + r;  // st[k * r + d]
  const int64_t n = ext[r - 1];
  std::array<int64_t, K> off{}, outer{};  // outer: rank-2 strides, kept in registers
  if (r == 2)
    for (int k = 0; k < K; ++k) outer[k] = st[k * 2];
  int64_t idx[kMaxCollapsedRank];
  for (int64_t d = r - 2, rest = lo; d >= 0; --d) {  // row lo's index over the outer dims
    idx[d] = rest % ext[d];
    rest /= ext[d];
    for (int k = 0; k < K; ++k) off[k] += idx[d] * st[k * r + d];
  }
  for (int64_t o = lo; o < hi; ++o) {
    row(o * n, off, n);
    if (r == 2) {
      for (int k = 0; k < K; ++k) off[k] += outer[k];
      continue;
    }
    for (int d = r - 2; d >= 0; --d) {  // odometer over the outer dims
      if (++idx[d] < ext[d]) {
        for (int k = 0; k < K; ++k) off[k] += st[k * r + d];
        break;
      }
      idx[d] = 0;
      for (int k = 0; k < K; ++k) off[k] -= st[k * r + d] * (ext[d] - 1);
    }
  }
}

// Elements per piece when one row is cut among threads: a multiple of every vector width, so
// on 64-byte aligned buffers each piece is walked with the same vectors as the whole row.
inline constexpr int64_t kRowPiece = 1024;

// Calls piece(a, b) on ranges of [0, n) that cover it once, cut at multiples of kRowPiece and
// split over the intra-op threads when `elems` (elements read and written) is large enough.
template <class Piece>
inline void for_each_piece(int64_t n, int64_t elems, Piece&& piece) {
  split_work((n + kRowPiece - 1) / kRowPiece, elems, [&](int64_t lo, int64_t hi) {
    piece(lo * kRowPiece, std::min(n, hi * kRowPiece));
  });
}

// Calls row(out_offset, in_offsets, n) for every innermost row of instr's plan, in order on
// each thread; large plans split whole rows over the intra-op threads (core/kernels/split_work.h),
// and a plan of one row (rank 1) is cut into pieces of kRowPiece elements unless `cut_row` is
// false (row kernels whose vector and scalar paths may differ in bits). Every element is
// computed by the same row code on any thread count. One call site, so the row body is
// inlined: short rows must not pay a call each.
template <int K, class Row>
inline void for_each_row(const Instr& instr, Row&& row, bool cut_row = true) {
  const int r = static_cast<int>(instr.p[0]);
  const int64_t rows = instr.p[2];
  const int64_t n = instr.v[r - 1];
  const int64_t elems = rows * n * (K + 1);
  if (rows == 1 && cut_row) {
    const int64_t* inner = instr.v.data() + r + (r - 1);  // inner[k * r]: operand k's row stride
    for_each_piece(n, elems, [&](int64_t a, int64_t b) {
      std::array<int64_t, K> off;
      for (int k = 0; k < K; ++k) off[k] = a * inner[k * r];
      row(a, off, b - a);
    });
    return;
  }
  split_work(rows, elems, [&](int64_t lo, int64_t hi) { for_rows<K>(instr, lo, hi, row); });
}

// --- Eigen row operands: a contiguous Map, or a broadcast scalar as a constant expression.
template <class T> using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T> using OutMap = Eigen::Map<Vec<T>>;
template <class T> using InMap = Eigen::Map<const Vec<T>>;

template <int S, class T>
inline auto eigen_operand(const T* p, int64_t n) {
  if constexpr (S == 1) return InMap<T>(p, n);
  else return Vec<T>::Constant(n, *p);
}

// --- Plain-loop row operands: element i of a contiguous row, or the hoisted broadcast value.
template <int S, class T> struct LoopOperand;
template <class T> struct LoopOperand<1, T> {
  const T* p;
  T operator()(int64_t i) const { return p[i]; }
};
template <class T> struct LoopOperand<0, T> {
  T v;
  T operator()(int64_t) const { return v; }
};
template <int S, class T>
inline LoopOperand<S, T> loop_operand(const T* p) {
  if constexpr (S == 1) return {p};
  else return {*p};
}

// Family parts; each returns false when instr.op is not one of its ops.
// REQUIRES (all): instr.out.size() > 0.
bool select_source(Instr& instr);   // constant, iota
bool select_unary(Instr& instr);    // unary math, sign, relu, isfinite, cast, logical_not
bool select_binary(Instr& instr);   // add, sub, mul, div, pow, maximum, minimum
bool select_compare(Instr& instr);  // compare ops, logical_and/or, select

}  // namespace fjit::kernels::ew
