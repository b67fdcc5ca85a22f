// The instruction sets fjit's hand-written kernels may use, chosen at run time.
//
// The library is compiled for x86-64-v3 (AVX2 + FMA; core/base/cpu_support.h refuses a CPU
// without it). A few kernels (core/kernels/gemm/ukernel_*.cc) also have versions for wider
// instruction sets, compiled per function with target attributes and called only where the
// CPU, and the operating system (the zmm register state in XCR0), support them. This file
// detects that once and says which set those kernels use:
//   avx2    AVX2 + FMA: every CPU that runs fjit;
//   avx512  AVX-512 F, BW, VL and DQ (and the OS saves the zmm state).
// AVX512_BF16 is reported on its own (bf16 dot products), and only counts with avx512. So is
// AMX (AMX-TILE and AMX-BF16 tile products, the OS saving the tile state and granting this
// process its use: arch_prctl, asked once): it counts with avx512 and AVX512_BF16, and is used
// for the bf16 products unless FJIT_ISA narrows the choice to avx512 or avx2.
//
// FJIT_ISA (core/base/config.def: auto, avx2, avx512, amx) can only narrow the choice: asking for
// avx512 on a CPU without it keeps avx2. On a given CPU and ISA every kernel's results depend on
// the shapes and data only (never on the thread count). Kernels of different sets may differ in
// the last bits unless they say otherwise (the GEMM's do not differ: ukernel.h; README: "What
// fjit requires of the CPU").
#pragma once

namespace fjit {

enum class Isa : int { avx2 = 0, avx512 = 1 };

// The widest set this CPU and its OS support (at least avx2).
Isa detected_isa();
// Whether this CPU has AVX512_BF16 (and avx512 is detected).
bool cpu_has_avx512_bf16();

// Process-wide: the set the kernels use from now on: min(detected_isa(), limit). Plans choose
// their kernels when compiled, so set it before compiling. The first jit or pmap sets the limit
// from FJIT_ISA (core/runtime/jit_core.h, apply_process_environment); the default is no limit.
void set_isa_limit(Isa limit);
Isa active_isa();
// Whether bf16 dot-product kernels may run: active_isa() is avx512 and the CPU has AVX512_BF16.
bool active_avx512_bf16();
// Whether this CPU has AMX-BF16 that this process may use (and AVX512_BF16 is detected).
bool cpu_has_amx_bf16();
// Process-wide, like set_isa_limit: whether the bf16 products may take the AMX tiles (the
// default: yes). FJIT_ISA=avx512 and avx2 say no.
void set_amx_allowed(bool allowed);
// Whether the bf16 products run on the AMX tiles: active_avx512_bf16(), cpu_has_amx_bf16() and
// set_amx_allowed's yes.
bool active_amx_bf16();

// "avx2", "avx512".
const char* isa_name(Isa isa);
// One line for reports: "avx512 + amx_bf16 (this CPU: avx2 avx512 avx512_bf16 amx_bf16)".
const char* isa_description();

}  // namespace fjit
