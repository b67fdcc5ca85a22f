// The loop of a compiled fused program (compiled_program.h): Loop<P, T> walks the constexpr
// table P once per vector packet (and once per element of the tail), so the compiler sees
// straight code: loads of the operands, the steps in order, the stores of the results.
//
// REQUIRES of the file that instantiates it: built with -ffp-contract=off (CMakeLists.txt sets
// it per file), so that no a * b + c is contracted into an fma and every step rounds as the
// unfused kernel of its op does. Packets cover each buffer from its start as the unfused
// kernels' do, and sqrt is their SqrtOp: so the results are bit-identical to the unfused
// kernels' on any thread count (up to which NaN's payload an add or mul of two NaNs keeps,
// since the matcher may pair a program's operands of add and mul in either order).
#pragma once

#include "core/base/eigen.h"  // first: it silences the intrinsics headers' false positives

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/elementwise/elementwise_sqrt.h"
#include "core/kernels/fused/compiled_program.h"
#include "core/kernels/kernel.h"

namespace fjit::compiled {

// V is a packet of T, or T itself for the tail. Eigen's padd etc. are plain + on scalars.
template <class T, class V, Op op>
inline V apply(const V& a, const V& b) {
  using namespace Eigen::internal;
  if constexpr (op == Op::Add) return padd(a, b);
  else if constexpr (op == Op::Sub) return psub(a, b);
  else if constexpr (op == Op::Mul) return pmul(a, b);
  else if constexpr (op == Op::Div) return pdiv(a, b);
  else if constexpr (op == Op::Sqrt) {
    if constexpr (std::is_same_v<V, T>) return kernels::ew::SqrtOp<T>()(a);
    else return kernels::ew::SqrtOp<T>().packetOp(a);
  } else if constexpr (op == Op::Sign) {
    // As the unfused sign kernel: 1, -1, or x itself (a zero keeps its sign, NaN stays NaN).
    if constexpr (std::is_same_v<V, T>) return a > T(0) ? T(1) : a < T(0) ? T(-1) : a;
    else {
      const V zero = pzero(a), one = pset1<V>(T(1));
      return pselect(pcmp_lt(zero, a), one, pselect(pcmp_lt(a, zero), pnegate(one), a));
    }
  } else {
    static_assert(op == Op::Add, "a compiled program uses an op without a compiled form");
  }
}

// Elements per thread range are a multiple of this, so only the last range has a tail.
inline constexpr int64_t kRangeAlign = 64;
// Element-steps from which the loop is split among the intra-op threads (as run_fused).
inline constexpr int64_t kParallelWork = int64_t{1} << 20;
// Elements between two asks of the step's deadline (core/base/step_deadline.h).
inline constexpr int64_t kDeadlineElems = int64_t{1} << 16;

template <const Program& P, class T>
struct Loop {
  static constexpr int N = P.n, K = P.k, E = P.e;

  template <class V, Arg a>
  static V arg(const V* r, const T* const* x, const V* bcast, int64_t i) {
    if constexpr (a.step) return r[a.i];
    else if constexpr (P.leaf[a.i] == Kind::scalar) return bcast[a.i];
    else if constexpr (std::is_same_v<V, T>) return x[a.i][i];
    else return Eigen::internal::ploadu<V>(x[a.i] + i);
  }

  template <class V, CStep s>
  static V step(const V* r, const T* const* x, const V* bcast, int64_t i) {
    const V a = arg<V, s.a>(r, x, bcast, i);
    if constexpr (is_unary_step(s.op)) return apply<T, V, s.op>(a, a);
    else return apply<T, V, s.op>(a, arg<V, s.b>(r, x, bcast, i));
  }

  // Every step at element (or packet) i, then the stores: each result is written after every
  // read of element i, so a result may alias an operand of its shape.
  template <class V>
  static void at(const T* const* x, const V* bcast, T* const* outs, int64_t i) {
    V r[N];
    [&]<size_t... I>(std::index_sequence<I...>) {
      ((r[I] = step<V, P.steps[I]>(r, x, bcast, i)), ...);
    }(std::make_index_sequence<N>{});
    for (int e = 0; e < E; ++e) {
      if constexpr (std::is_same_v<V, T>) outs[e][i] = r[P.results[e]];
      else Eigen::internal::pstoreu(outs[e] + i, r[P.results[e]]);
    }
  }

  // Past the step's deadline (asked every kDeadlineElems elements) the rest of the range is
  // skipped; the packets start at the same elements as without a deadline, so every element
  // computed is computed the same way.
  static void range(const T* const* x, T* const* outs, int64_t lo, int64_t hi, int64_t deadline) {
    using V = typename Eigen::internal::packet_traits<T>::type;
    constexpr int64_t kSize = Eigen::internal::packet_traits<T>::size;
    V vb[K];
    T sb[K];
    for (int k = 0; k < K; ++k) {
      sb[k] = P.leaf[k] == Kind::scalar ? *x[k] : T(0);
      vb[k] = Eigen::internal::pset1<V>(sb[k]);
    }
    int64_t i = lo;
    while (i + kSize <= hi) {
      if (deadline_passed(deadline)) [[unlikely]] return;
      const int64_t stop = std::min(hi, i + kDeadlineElems);
      for (; i + kSize <= stop; i += kSize) at<V>(x, vb, outs, i);
    }
    for (; i < hi; ++i) at<T>(x, sb, outs, i);
  }

  // instr.v: for each leaf, the index in instr.ins of the operand it reads; then for each
  // result, where it goes: -1 the output, e >= 0 the instruction's e-th further result.
  static void run(const Instr& in, const Frame& f) {
    std::array<const T*, K> x;
    for (int k = 0; k < K; ++k) x[k] = in.in<T>(f, static_cast<int>(in.v[k]));
    std::array<T*, E> outs;
    const size_t further = in.ins.size();
    for (int e = 0; e < E; ++e) {
      const int64_t slot = in.v[K + e];
      outs[e] = slot < 0 ? in.output<T>(f) : static_cast<T*>(f.bufs[in.in_bufs[further + slot]]);
    }
    const int64_t n = in.out.size();
    const int64_t units = n / kRangeAlign;
    const int threads = n * static_cast<int64_t>(N) >= kParallelWork
                            ? static_cast<int>(std::min<int64_t>(units, intra_op_threads()))
                            : 1;
    const int64_t deadline = thread_step_deadline();
    if (threads <= 1) return range(x.data(), outs.data(), 0, n, deadline);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      range(x.data(), outs.data(), units * t / threads * kRangeAlign,
            t + 1 == threads ? n : units * (t + 1) / threads * kRangeAlign, deadline);
      fpe::collect_worker_flags();
    }
  }
};

// A program with its loops, as registered (register_compiled_programs, fused_compiled.h).
struct CompiledEntry {
  const Program* program = nullptr;
  KernelFn f32 = nullptr, f64 = nullptr;
};

template <const Program& P>
CompiledEntry compiled_entry() {
  return {&P, &Loop<P, float>::run, &Loop<P, double>::run};
}

}  // namespace fjit::compiled
