// The bf16 peak loops of bf16_peak.h, compiled per function for their instruction sets and run
// only where core/base/isa.h says the CPU (and, for AMX, the process) has them.
#include "bench/bf16_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/base/isa.h"

namespace fjit::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
// In memory, not built on the stack: GCC 12 does not see LDTILECFG read its operand.
alignas(64) const TileConfig kConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile,amx-bf16"))) double amx_loop_gflops(int64_t iters) {
  alignas(64) static uint16_t a[16 * 32], b[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3f80;  // 1.0
    b[i] = 0x3a80;  // about 1e-3: the sums stay finite
  }
  _tile_loadconfig(&kConfig);
  _tile_loadd(4, a, 64);
  _tile_loadd(6, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const double t0 = now_s();
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 4, 6);
  }
  const double dt = now_s() - t0;
  alignas(64) static float sink[16 * 16];
  _tile_stored(0, sink, 64);
  _tile_release();
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iters) / dt * 1e-9;
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop_gflops(int64_t iters) {
  constexpr int kAcc = 12;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.125f * i);
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3a803a80), y = (__m512bh)_mm512_set1_epi32(0x3a803a80);
  const double t0 = now_s();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  const double dt = now_s() - t0;
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);  // the accumulators are used, so the loop stays
  volatile float sink = lanes[0] + lanes[15];
  (void)sink;
  return kAcc * 64.0 * static_cast<double>(iters) / dt * 1e-9;
}

}  // namespace

Bf16Peak measure_bf16_peak() {
  Bf16Peak p;
  for (int run = 0; run < 5; ++run) {
    if (cpu_has_amx_bf16()) p.amx_gflops = std::max(p.amx_gflops, amx_loop_gflops(2000000));
    if (cpu_has_avx512_bf16()) p.dpbf16_gflops = std::max(p.dpbf16_gflops, dpbf16_loop_gflops(10000000));
  }
  return p;
}

}  // namespace fjit::bench
