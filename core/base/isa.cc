// Run-time instruction-set detection (isa.h): cpuid for the features, XGETBV for the state the
// operating system saves on a context switch (a CPU with AVX-512 under an OS that does not save
// the zmm registers cannot use them).
#include "core/base/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

namespace fjit {
namespace {

uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

struct Detected {
  bool avx2 = false, avx512 = false, bf16 = false, amx = false;
};

// Linux gives a process the AMX tile data state only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); a refusal (an older kernel) leaves AMX unused.
bool request_amx_state() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
  return false;
#endif
}

Detected detect() {
  Detected d;
  unsigned a = 0, b = 0, c = 0, dx = 0;
  if (!__get_cpuid(1, &a, &b, &c, &dx)) return d;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), avx = c & (1u << 28);
  if (!osxsave || !avx) return d;
  const uint64_t xcr = xcr0();
  const bool ymm_state = (xcr & 0x6) == 0x6;     // SSE and AVX state
  const bool zmm_state = (xcr & 0xe6) == 0xe6;   // also opmask, ZMM_Hi256, Hi16_ZMM
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &dx)) return d;
  const bool avx2 = b & (1u << 5);
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  d.avx2 = ymm_state && avx2 && fma;
  d.avx512 = d.avx2 && zmm_state && f && dq && bw && vl;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (d.avx512 && a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) d.bf16 = a1 & (1u << 5);
  // AMX-BF16 (EDX bit 22) and AMX-TILE (bit 24) of leaf 7; XCR0 bits 17 and 18: the OS saves
  // the tile configuration and data.
  const bool amx_cpu = (dx & (1u << 22)) && (dx & (1u << 24));
  const bool tile_state = (xcr & (uint64_t{3} << 17)) == (uint64_t{3} << 17);
  d.amx = d.bf16 && amx_cpu && tile_state && request_amx_state();
  return d;
}

const Detected& detected() {
  static const Detected d = detect();
  return d;
}

std::atomic<int> g_limit{static_cast<int>(Isa::avx512)};
std::atomic<bool> g_amx_allowed{true};

}  // namespace

Isa detected_isa() { return detected().avx512 ? Isa::avx512 : Isa::avx2; }
bool cpu_has_avx512_bf16() { return detected().bf16; }

void set_isa_limit(Isa limit) { g_limit.store(static_cast<int>(limit), std::memory_order_relaxed); }

Isa active_isa() {
  const int limit = g_limit.load(std::memory_order_relaxed);
  return static_cast<Isa>(std::min(limit, static_cast<int>(detected_isa())));
}

bool active_avx512_bf16() { return active_isa() == Isa::avx512 && cpu_has_avx512_bf16(); }

bool cpu_has_amx_bf16() { return detected().amx; }
void set_amx_allowed(bool allowed) { g_amx_allowed.store(allowed, std::memory_order_relaxed); }
bool active_amx_bf16() {
  return active_avx512_bf16() && cpu_has_amx_bf16() && g_amx_allowed.load(std::memory_order_relaxed);
}

const char* isa_name(Isa isa) { return isa == Isa::avx512 ? "avx512" : "avx2"; }

const char* isa_description() {
  thread_local std::string s;
  s = std::string(isa_name(active_isa())) + (active_amx_bf16() ? " + amx_bf16" : "") +
      " (this CPU: avx2" + (detected().avx512 ? " avx512" : "") +
      (detected().bf16 ? " avx512_bf16" : "") + (detected().amx ? " amx_bf16" : "") + ")";
  return s.c_str();
}

}  // namespace fjit
