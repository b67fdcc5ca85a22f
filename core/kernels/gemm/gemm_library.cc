// Plain products on BLIS (gemm_library.h), through its typed API with a runtime object per
// call that carries the intra-op thread count.
#include "core/kernels/gemm/gemm_library.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "core/base/isa.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"

#ifdef FJIT_HAVE_BLIS
#include <blis.h>
#endif

namespace fjit {
namespace {

// Below these the library's packing and thread start-up cost more than they save: a depth
// of a few elements (the last layer's gradient g @ W^T), or a product of a few MFLOP.
constexpr int64_t kMinDepth = 32;
constexpr int64_t kMinFlops = int64_t{1} << 21;
// Threads only from this size on, as the fjit driver (gemm_update.cc).
constexpr int64_t kThreadFlops = int64_t{1} << 22;

std::atomic<bool> g_allowed{true};

// Under a step deadline, products of at least 2 * kPanelFlops flops on BLIS's native path are
// cut into column panels of about kPanelFlops each, and at least kMinPanel columns: each panel
// packs all of op(A) again, which narrower panels pay for (bench/RESULTS.md, issue 30).
constexpr int64_t kPanelFlops = int64_t{1} << 30;
constexpr int64_t kMinPanel = 512;
std::atomic<int64_t> g_panel_flops{kPanelFlops}, g_min_panel{kMinPanel};
std::atomic<int64_t> g_panels_run{0}, g_panels_total{0};

#ifdef FJIT_HAVE_BLIS
// C[:, n0, n0 + w) = op(A) op(B)[:, n0, n0 + w) for row-major operands given as strides:
// element (i, p) of op(A) is at a[i * rsa + p * csa]. `native`: BLIS's small-matrix ("sup")
// path is off for this call.
template <class T>
void blis_gemm(int64_t m, int64_t k, int64_t w, T* a, inc_t rsa, inc_t csa, T* b, inc_t rsb,
               inc_t csb, T* c, int64_t ldc, int threads, bool native) {
  T one = 1, zero = 0;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  if (native) bli_rntm_disable_l3_sup(&rntm);
  if constexpr (std::is_same_v<T, float>)
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, w, k, &one, a, rsa, csa, b, rsb, csb,
                 &zero, c, ldc, 1, nullptr, &rntm);
  else
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, w, k, &one, a, rsa, csa, b, rsb, csb,
                 &zero, c, ldc, 1, nullptr, &rntm);
}

// Whether BLIS computes an m x n x k product on its native (packed) path: its small-matrix
// path takes a product with any dimension under its thresholds (bli_gemmsup).
bool on_native_path(num_t dt, int64_t m, int64_t n, int64_t k) {
  return !bli_cntx_l3_sup_thresh_is_met(dt, m, n, k, bli_gks_query_cntx());
}

// Under a step deadline a long product on the native path is computed in column panels
// (panels of B and C), asking the deadline before each; the panels left are skipped. On the
// native path every element of C is the micro-kernel's accumulation over the same depth
// blocks (KC) whatever the panel's width, so the panels compute the same bits as the whole
// product (tests/gemm_library_panels_test.cc checks it on BLIS's kernels). The small-matrix
// path is not cut: its kernels and edge handling depend on the panel's width and on how m
// compares with it, and cutting changes bits there (bench/RESULTS.md, issue 30).
template <class T, bool TA, bool TB>
void blis_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  const int threads = 2 * m * n * k >= kThreadFlops ? intra_op_threads() : 1;
  T* a = const_cast<T*>(in.in<T>(f, 0));
  T* b = const_cast<T*>(in.in<T>(f, 1));
  T* c = in.output<T>(f);
  const inc_t rsa = TA ? 1 : k, csa = TA ? m : 1, rsb = TB ? 1 : n, csb = TB ? k : 1;
  const int64_t deadline = thread_step_deadline();
  const int64_t panel_flops = g_panel_flops.load(std::memory_order_relaxed);
  // Panel width: about panel_flops, a multiple of 64 columns (whole micro-tiles on every
  // kernel BLIS has), at least the minimum.
  const int64_t w = std::max(g_min_panel.load(std::memory_order_relaxed),
                             (panel_flops / (2 * m * k) + 63) / 64 * 64);
  constexpr num_t dt = std::is_same_v<T, float> ? BLIS_FLOAT : BLIS_DOUBLE;
  if (deadline == 0 || 2 * m * n * k < 2 * panel_flops || n <= w || !on_native_path(dt, m, n, k)) {
    blis_gemm<T>(m, k, n, a, rsa, csa, b, rsb, csb, c, n, threads, false);
    return;
  }
  const int64_t panels = (n + w - 1) / w;
  int64_t run = 0;
  for (int64_t p = 0; p < panels && !deadline_passed(deadline); ++p, ++run) {
    const int64_t n0 = p * w;
    blis_gemm<T>(m, k, std::min(w, n - n0), a, rsa, csa, b + n0 * csb, rsb, csb, c + n0, n,
                 threads, true);
  }
  g_panels_run.store(run, std::memory_order_relaxed);
  g_panels_total.store(panels, std::memory_order_relaxed);
}

template <class T>
KernelFn pick(bool ta, bool tb) {
  if (ta) return tb ? blis_kernel<T, true, true> : blis_kernel<T, true, false>;
  return tb ? blis_kernel<T, false, true> : blis_kernel<T, false, false>;
}
#endif

}  // namespace

void set_gemm_library_allowed(bool allowed) { g_allowed.store(allowed, std::memory_order_relaxed); }

bool gemm_library_has_kernels() {
#ifdef FJIT_HAVE_BLIS
  // BLIS first: with BLIS_ARCH_TYPE set, BLIS 0.9 checks the id against its kernel structure,
  // and aborts when asked for the architecture before that is set up.
  static const bool tuned = (bli_init(), bli_arch_query_id() != BLIS_ARCH_GENERIC);
  return tuned;
#else
  return false;
#endif
}

bool gemm_library_kernels_avx512() {
#ifdef FJIT_HAVE_BLIS
  static const bool wide = [] {
    if (!gemm_library_has_kernels()) return false;
    const arch_t id = bli_arch_query_id();
    return id == BLIS_ARCH_SKX || id == BLIS_ARCH_KNL;
  }();
  return wide;
#else
  return false;
#endif
}

bool gemm_library_enabled() {
#ifdef FJIT_HAVE_BLIS
  return g_allowed.load(std::memory_order_relaxed) && gemm_library_has_kernels() &&
         (active_isa() != Isa::avx512 || gemm_library_kernels_avx512());
#else
  return false;
#endif
}

const char* gemm_library_name() {
#ifdef FJIT_HAVE_BLIS
  static const std::string base = [] {
    const bool tuned = gemm_library_has_kernels();  // initializes BLIS
    return std::string("BLIS ") + bli_info_get_version_str() + " (" + bli_arch_string(bli_arch_query_id()) +
           (tuned ? "" : ": no kernels for this CPU, not used");
  }();
  thread_local std::string name;
  const bool narrower = gemm_library_has_kernels() && active_isa() == Isa::avx512 && !gemm_library_kernels_avx512();
  name = base + (narrower ? ": AVX2 kernels, not used beside fjit's AVX-512 ones)" : ")");
  return name.c_str();
#else
  return "none";
#endif
}

bool select_library_matmul(Instr& instr, int64_t m, int64_t k, int64_t n) {
#ifdef FJIT_HAVE_BLIS
  const DType t = instr.out.dtype;
  if (!gemm_library_enabled() || (t != DType::f32 && t != DType::f64)) return false;
  if (k < kMinDepth || 2 * m * n * k < kMinFlops) return false;
  // A long product BLIS would run on its small-matrix path could not be cut to ask a step
  // deadline without changing bits (above): fjit's own driver takes it, which asks between
  // blocks. Decided from the shape alone, so the bits do not depend on whether a deadline is set.
  const num_t dt = t == DType::f32 ? BLIS_FLOAT : BLIS_DOUBLE;
  if (2 * m * n * k >= 2 * g_panel_flops.load(std::memory_order_relaxed) && !on_native_path(dt, m, n, k))
    return false;
  instr.p[0] = m;
  instr.p[1] = k;
  instr.p[2] = n;
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  instr.fn = t == DType::f32 ? pick<float>(ta, tb) : pick<double>(ta, tb);
  return true;
#else
  (void)instr, (void)m, (void)k, (void)n;
  return false;
#endif
}

void set_library_panels(int64_t flops, int64_t min_columns) {
  g_panel_flops.store(flops > 0 ? flops : kPanelFlops, std::memory_order_relaxed);
  g_min_panel.store(min_columns > 0 ? min_columns : kMinPanel, std::memory_order_relaxed);
}
LibraryPanels take_library_panels() {
  return {g_panels_run.exchange(0), g_panels_total.exchange(0)};
}

}  // namespace fjit
