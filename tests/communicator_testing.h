// Synthetic per-rank data whose reductions have closed forms, for the communicator tests
// (thread and MPI backends use the same tables). Test-only, header-only: not part of fjit.
//
// contribution<T>(op, r, n, i) is what rank r of n puts at element i; expected<T>(op, n, i)
// is the exact result. Values are chosen so that the expected result is exact in T (sums of
// quarter-integers, bit patterns for the logical ops), and so that i32 sums wrap.
// order_sensitive<T>(r, i) is data whose float sum depends on the order of addition, with
// rank_order_sum<T> the only correct answer under fjit's rank-order contract.
// run_one_of_each / one_of_each: one collective of each kind and what metrics() then holds.
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "core/base/metrics.h"

#include "core/kernels/collective/communicator.h"

namespace fjit::testing {

// Bit r of i: every subset of ranks is "on" somewhere, so or/max/min see all cases.
inline bool bit_of(int r, int64_t i) { return ((i >> r) & 1) != 0; }
inline int64_t low_mask(int n) { return (int64_t{1} << n) - 1; }

template <class T>
T contribution(ReduceOp op, int r, int n, int64_t i) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return bit_of(r, i) ? 1 : 0;  // booleans: every op works on the bit pattern
  } else {
    switch (op) {
      case ReduceOp::sum:
        if constexpr (std::is_same_v<T, int32_t>) {
          // Near 2^30 so that three or more ranks overflow and the sum must wrap.
          return static_cast<int32_t>(0x40000000 + 7 * r + (i % 1000));
        } else {
          return static_cast<T>(r + 1) + static_cast<T>(0.25) * static_cast<T>(i % 1024);
        }
      case ReduceOp::max:
      case ReduceOp::min:
        return static_cast<T>(((r + i) % n) * 3 - (i % 100));
      case ReduceOp::logical_or:
        return bit_of(r, i) ? static_cast<T>(r + 2) : T(0);  // non-1 values must normalise
    }
  }
  return T(0);
}

template <class T>
T expected(ReduceOp op, int n, int64_t i) {
  const int64_t bits = i & low_mask(n);
  if constexpr (std::is_same_v<T, uint8_t>) {
    if (op == ReduceOp::min) return bits == low_mask(n) ? 1 : 0;
    return bits != 0 ? 1 : 0;  // sum on booleans is logical_or
  } else {
    switch (op) {
      case ReduceOp::sum:
        if constexpr (std::is_same_v<T, int32_t>) {
          const uint64_t total = uint64_t{0x40000000} * n + 7ull * n * (n - 1) / 2 +
                                 static_cast<uint64_t>(n) * static_cast<uint64_t>(i % 1000);
          return static_cast<int32_t>(static_cast<uint32_t>(total));
        } else {
          return static_cast<T>(n * (n + 1) / 2) +
                 static_cast<T>(n) * static_cast<T>(0.25) * static_cast<T>(i % 1024);
        }
      case ReduceOp::max: return static_cast<T>((n - 1) * 3 - (i % 100));
      case ReduceOp::min: return static_cast<T>(-(i % 100));
      case ReduceOp::logical_or: return bits != 0 ? T(1) : T(0);
    }
  }
  return T(0);
}

// Wildly different magnitudes and signs, exactly representable, deterministic everywhere.
template <class T>
T order_sensitive(int r, int64_t i) {
  uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(r + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 32;
  const T mantissa = T(1) + static_cast<T>(h & 0xFFFFF) / static_cast<T>(1 << 20);
  const int exponent = static_cast<int>((h >> 20) % 40) - 20;
  const T sign = ((h >> 40) & 1) ? T(-1) : T(1);
  return sign * std::ldexp(mantissa, exponent);
}

// ((x0 + x1) + x2) + ... : the contract's answer.
template <class T>
T rank_order_sum(int n, int64_t i) {
  T acc = order_sensitive<T>(0, i);
  for (int r = 1; r < n; ++r) acc = acc + order_sensitive<T>(r, i);
  return acc;
}

// The same values added in reverse rank order: differs from rank_order_sum somewhere when
// n >= 3, which proves a test of the order has teeth.
template <class T>
T reverse_order_sum(int n, int64_t i) {
  T acc = order_sensitive<T>(n - 1, i);
  for (int r = n - 2; r >= 0; --r) acc = acc + order_sensitive<T>(r, i);
  return acc;
}

template <class T>
std::vector<T> fill(int64_t count, T (*f)(int, int64_t), int r) {
  std::vector<T> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = f(r, i);
  return v;
}

// One collective of each kind on `c`: all-reduces of `big` and of 10 f32, a broadcast of 8
// bytes, an all-gather of 4 bytes per rank, a barrier. expect_one_of_each(big) is what one
// process's metrics() hold after it, counted from a reset: 2 all-reduces of (big + 10) * 4
// bytes, timed; 3 other collectives of 12 bytes (barriers carry none), timed.
inline void run_one_of_each(Communicator& c, int64_t big) {
  std::vector<float> buf(static_cast<size_t>(big), 1.0f);
  c.all_reduce(buf.data(), big, DType::f32, ReduceOp::sum);
  c.all_reduce(buf.data(), 10, DType::f32, ReduceOp::max);
  int64_t b = 7;
  c.broadcast(&b, sizeof b, 0);
  std::vector<int32_t> all(static_cast<size_t>(c.size()));
  const int32_t mine = c.rank();
  c.all_gather(&mine, all.data(), sizeof mine);
  c.barrier();
}
struct OneOfEach {
  int64_t allreduce_calls, allreduce_bytes, allreduce_timed, collective_calls, collective_bytes,
      collective_timed;
  bool allreduce_time_positive;
};
inline OneOfEach recorded() {
  const Metrics& m = metrics();
  return {m.allreduce_calls.load(),   m.allreduce_bytes.load(),  m.allreduce_time.count(),
          m.collective_calls.load(),  m.collective_bytes.load(), m.collective_time.count(),
          m.allreduce_time.total_ns() > 0};
}
inline bool operator==(const OneOfEach& a, const OneOfEach& b) {
  return a.allreduce_calls == b.allreduce_calls && a.allreduce_bytes == b.allreduce_bytes &&
         a.allreduce_timed == b.allreduce_timed && a.collective_calls == b.collective_calls &&
         a.collective_bytes == b.collective_bytes && a.collective_timed == b.collective_timed &&
         a.allreduce_time_positive == b.allreduce_time_positive;
}
inline std::ostream& operator<<(std::ostream& os, const OneOfEach& r) {
  return os << "all-reduce calls " << r.allreduce_calls << " bytes " << r.allreduce_bytes
            << " timed " << r.allreduce_timed << (r.allreduce_time_positive ? "" : " (zero time)")
            << ", other calls " << r.collective_calls << " bytes " << r.collective_bytes
            << " timed " << r.collective_timed;
}
inline OneOfEach one_of_each(int64_t big) { return {2, (big + 10) * 4, 2, 3, 8 + 4, 3, true}; }

}  // namespace fjit::testing
