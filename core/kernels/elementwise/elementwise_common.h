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

#include <array>
#include <cstdint>

#include "core/kernels/kernel.h"

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

// Calls row(out_offset, in_offsets, n) for every innermost row of instr's plan, in order.
// One call site, so the row body is inlined: short rows must not pay a call each.
template <int K, class Row>
inline void for_each_row(const Instr& instr, Row&& row) {
  const int r = static_cast<int>(instr.p[0]);
  const int64_t rows = instr.p[2];
  const int64_t* ext = instr.v.data();
  const int64_t* st = ext + r;  // st[k * r + d]
  const int64_t n = ext[r - 1];
  std::array<int64_t, K> off{}, outer{};  // outer: rank-2 strides, kept in registers
  if (r == 2)
    for (int k = 0; k < K; ++k) outer[k] = st[k * 2];
  int64_t idx[kMaxCollapsedRank];
  for (int d = 0; d < r - 1; ++d) idx[d] = 0;
  for (int64_t o = 0; o < rows; ++o) {
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
