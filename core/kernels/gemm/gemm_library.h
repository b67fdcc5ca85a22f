// Plain products by a GEMM library (BLIS, when the build found it: CMake's FJIT_BLIS).
//
// BLIS's gemm threads its loops over output columns and rows, never the depth, and every
// output tile goes through the same micro-kernel (edge tiles included, through a temporary
// tile), so each element's arithmetic depends on the shapes only: results are the same with 1,
// 2 or more intra-op threads (tests/determinism_test.cc checks every path). fjit's own driver
// (gemm_update.cc) still runs the GEMM updates with fused epilogues, the narrow and batched
// products, i32, and everything when BLIS is absent, has no kernels for this CPU (its generic
// configuration) or only narrower ones than fjit's (AVX2 kernels where fjit runs AVX-512), or
// FJIT_GEMM=eigen.
//
// Under a step deadline (core/base/step_deadline.h) a long product on BLIS's native path runs
// in column panels and asks the deadline before each; a deadline that is not reached changes
// no bit. Products on BLIS's small-matrix path (a dimension under its thresholds) cannot be cut
// so: the short ones run whole, and a long one (as long as two panels) is left to fjit's
// driver, which asks the deadline between blocks (the choice depends on the shape only).
#pragma once

#include <cstdint>

#include "core/kernels/kernel.h"

namespace fjit {

// Process-wide: whether plans compiled from now on may use the library (default yes). The
// first jit or pmap sets it from FJIT_GEMM (core/runtime/jit_core.h, apply_process_environment).
void set_gemm_library_allowed(bool allowed);
// Whether the library has kernels tuned for this CPU: BLIS picks its configuration at run time,
// and on a CPU its build does not know it falls back to its generic reference kernels, which
// are several times slower than fjit's driver (bench/RESULTS.md, issue 27).
bool gemm_library_has_kernels();
// Whether those kernels use AVX-512 (BLIS's skx and knl configurations). Where they do not and
// fjit's kernels are AVX-512 ones (core/base/isa.h), fjit's packed GEMM is faster (BLIS's
// haswell kernels on an AVX-512 CPU: bench/RESULTS.md, issue 29), so the library is left out.
bool gemm_library_kernels_avx512();
// Whether plain products go to the library: built with it, allowed, with kernels for this CPU,
// and those kernels no narrower than fjit's (above).
bool gemm_library_enabled();

// "BLIS 0.9.0 (zen3)", "BLIS 0.9.0 (generic: no kernels for this CPU, not used)",
// "BLIS 0.9.0 (haswell: AVX2 kernels, not used beside fjit's AVX-512 ones)" or "none".
const char* gemm_library_name();

// Prepares out[m, n] = op(A) op(B) (instr.ins = {A, B}; the attrs' trans_a / trans_b; A may be
// [batch, M, K] folded into m = batch * M rows) on the library. False, with instr.fn untouched,
// when the library is off, the dtype is not f32/f64, or the product is too small or too shallow
// to gain from it (fjit's driver then takes it).
bool select_library_matmul(Instr& instr, int64_t m, int64_t k, int64_t n);

// For tests: under a deadline, products of at least 2 * flops are cut into panels of about
// `flops` and at least `min_columns` wide (0: the defaults), and plans compiled from now on
// leave products of at least 2 * flops on the small-matrix path to fjit's driver. Process-wide.
void set_library_panels(int64_t flops, int64_t min_columns);
// For tests: the panels the last product cut under a deadline ran, of how many, since the last
// call (zeros: none was cut).
struct LibraryPanels {
  int64_t run = 0, total = 0;
};
LibraryPanels take_library_panels();

}  // namespace fjit
