// Compiled fused programs (fused_compiled.h). Each program is a constexpr table; a template
// walks it once per packet (and once per element of the tail), so the compiler sees straight
// code: loads of the external operands, the ops in order, the stores of the results.
//
// To add a program: write its table in fused_compiled_tables.h as the fusion planner emits it
// (a plan dump's "fused[...]" label shows it) and list it in Tables below. Only ops of CStep's
// set may appear.
#include "core/kernels/fused/fused_compiled.h"

#include "core/base/eigen.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/kernels/elementwise/elementwise_sqrt.h"
#include "core/kernels/fused/fused_compiled_tables.h"
#include "core/base/threads.h"

namespace fjit {
namespace {

using namespace compiled;

// Elements per thread range are a multiple of this, so only the last range has a tail.
constexpr int64_t kRangeAlign = 64;
// Element-steps from which the loop is split among the intra-op threads (as run_fused).
constexpr int64_t kParallelWork = int64_t{1} << 20;

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
  } else {
    static_assert(op == Op::Add, "a compiled program uses an op without a compiled form");
  }
}

template <const auto& P, class T>
struct Loop {
  static constexpr size_t N = P.steps.size(), K = P.ext.size(), E = P.extras.size();

  template <class V, Arg a>
  static V arg(const V* r, const T* const* x, const V* bcast, int64_t i) {
    if constexpr (a.step) return r[a.i];
    else if constexpr (P.ext[a.i] == Kind::scalar) return bcast[a.i];
    else if constexpr (std::is_same_v<V, T>) return x[a.i][i];
    else return Eigen::internal::ploadu<V>(x[a.i] + i);
  }

  template <class V, CStep s>
  static V step(const V* r, const T* const* x, const V* bcast, int64_t i) {
    const V a = arg<V, s.a>(r, x, bcast, i);
    if constexpr (s.op == Op::Sqrt) return apply<T, V, s.op>(a, a);
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
    for (size_t e = 0; e <= E; ++e) {
      const V& v = r[e < E ? P.extras[e] : N - 1];
      if constexpr (std::is_same_v<V, T>) outs[e][i] = v;
      else Eigen::internal::pstoreu(outs[e] + i, v);
    }
  }

  static void range(const T* const* x, T* const* outs, int64_t lo, int64_t hi) {
    using V = typename Eigen::internal::packet_traits<T>::type;
    constexpr int64_t kSize = Eigen::internal::packet_traits<T>::size;
    V vb[K];
    T sb[K];
    for (size_t k = 0; k < K; ++k) {
      sb[k] = P.ext[k] == Kind::scalar ? *x[k] : T(0);
      vb[k] = Eigen::internal::pset1<V>(sb[k]);
    }
    int64_t i = lo;
    for (; i + kSize <= hi; i += kSize) at<V>(x, vb, outs, i);
    for (; i < hi; ++i) at<T>(x, sb, outs, i);
  }

  // instr.v: the external operands' indices in instr.ins, in the table's order.
  static void run(const Instr& in, const Frame& f) {
    std::array<const T*, K> x;
    for (size_t k = 0; k < K; ++k) x[k] = in.in<T>(f, static_cast<int>(in.v[k]));
    std::array<T*, E + 1> outs;
    for (size_t e = 0; e < E; ++e) outs[e] = static_cast<T*>(f.bufs[in.in_bufs[K + e]]);
    outs[E] = in.output<T>(f);
    const int64_t n = in.out.size();
    const int64_t units = n / kRangeAlign;
    const int threads = n * static_cast<int64_t>(N) >= kParallelWork
                            ? static_cast<int>(std::min<int64_t>(units, intra_op_threads()))
                            : 1;
    if (threads <= 1) return range(x.data(), outs.data(), 0, n);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t)
      range(x.data(), outs.data(), units * t / threads * kRangeAlign,
            t + 1 == threads ? n : units * (t + 1) / threads * kRangeAlign);
  }
};

// Whether `program` is P's table; fills `order` with instr.ins indices in the table's order.
template <const auto& P>
bool matches(const Instr& instr, const std::vector<FusedOp>& program,
             const std::vector<int>& extras, std::vector<int64_t>& order) {
  if (program.size() != P.steps.size() || instr.ins.size() != P.ext.size()) return false;
  if (!std::equal(extras.begin(), extras.end(), P.extras.begin(), P.extras.end())) return false;
  std::vector<int> canon(instr.ins.size(), -1);
  order.clear();
  const auto same = [&](int a, const Arg& want) {
    if (a >= 0) return want.step && want.i == a;
    const int k = -1 - a;
    if (canon[k] < 0) {
      canon[k] = static_cast<int>(order.size());
      order.push_back(k);
    }
    return !want.step && want.i == canon[k];
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const FusedOp& op = program[i];
    const CStep& s = P.steps[i];
    if (op.op != s.op || op.dtype != instr.out.dtype) return false;
    if (op.args.size() != (s.op == Op::Sqrt ? 1u : 2u)) return false;
    if (!same(op.args[0], s.a) || (op.args.size() == 2 && !same(op.args[1], s.b))) return false;
  }
  if (order.size() != P.ext.size()) return false;
  for (size_t c = 0; c < order.size(); ++c) {
    const ValueType& t = instr.ins[order[c]];
    if (t.dtype != instr.out.dtype) return false;
    if (P.ext[c] == Kind::full ? t.shape != instr.out.shape : t.size() != 1) return false;
  }
  return true;
}

template <const auto& P>
bool try_program(Instr& instr, const std::vector<FusedOp>& program,
                 const std::vector<int>& extras) {
  std::vector<int64_t> order;
  if (!matches<P>(instr, program, extras, order)) return false;
  instr.v = std::move(order);
  instr.prepared = nullptr;
  instr.fn = instr.out.dtype == DType::f32 ? &Loop<P, float>::run : &Loop<P, double>::run;
  return true;
}

// Every table: select tries each (at most one matches, since matching is exact), and a
// prepared instruction names its table by its loop.
template <const auto&... Ps>
struct Tables {
  static bool select(Instr& instr, const std::vector<FusedOp>& program,
                     const std::vector<int>& extras) {
    return (try_program<Ps>(instr, program, extras) || ...);
  }
  static const char* name(KernelFn fn) {
    const char* found = nullptr;
    ((found = !found && (fn == &Loop<Ps, float>::run || fn == &Loop<Ps, double>::run) ? Ps.name
                                                                                    : found),
     ...);
    return found;
  }
};
using AllTables = Tables<kAdam, kAdamSquareIn, kAdamL2, kAdamW, kAdamWSquareIn, kSgdMomentum,
                         kSgdNesterov, kSgdMomentumL2, kSgdNesterovL2>;

}  // namespace

bool select_compiled_fused(Instr& instr, const std::vector<FusedOp>& program,
                           const std::vector<int>& extras) {
  if (instr.out.dtype != DType::f32 && instr.out.dtype != DType::f64) return false;
  if (instr.out.size() == 0) return false;
  return AllTables::select(instr, program, extras);
}

const char* compiled_fused_name(const Instr& instr) {
  return instr.fn ? AllTables::name(instr.fn) : nullptr;
}

}  // namespace fjit
