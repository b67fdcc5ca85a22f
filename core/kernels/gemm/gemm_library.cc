// Plain products on BLIS (gemm_library.h), through its typed API with a runtime object per
// call that carries the intra-op thread count.
#include "core/kernels/gemm/gemm_library.h"

#include <atomic>
#include <string>

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

#ifdef FJIT_HAVE_BLIS
// Row-major operands as strides: element (i, p) of op(A) is at a[i * rs + p * cs].
template <class T, bool TA, bool TB>
void blis_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  T one = 1, zero = 0;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  const int threads = 2 * m * n * k >= kThreadFlops ? intra_op_threads() : 1;
  bli_rntm_set_num_threads(threads, &rntm);
  T* a = const_cast<T*>(in.in<T>(f, 0));
  T* b = const_cast<T*>(in.in<T>(f, 1));
  T* c = in.output<T>(f);
  const inc_t rsa = TA ? 1 : k, csa = TA ? m : 1, rsb = TB ? 1 : n, csb = TB ? k : 1;
  if constexpr (std::is_same_v<T, float>)
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, a, rsa, csa, b, rsb, csb,
                 &zero, c, n, 1, nullptr, &rntm);
  else
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, a, rsa, csa, b, rsb, csb,
                 &zero, c, n, 1, nullptr, &rntm);
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
  static const bool tuned = bli_arch_query_id() != BLIS_ARCH_GENERIC;
  return tuned;
#else
  return false;
#endif
}

bool gemm_library_enabled() {
#ifdef FJIT_HAVE_BLIS
  return g_allowed.load(std::memory_order_relaxed) && gemm_library_has_kernels();
#else
  return false;
#endif
}

const char* gemm_library_name() {
#ifdef FJIT_HAVE_BLIS
  static const std::string name =
      std::string("BLIS ") + bli_info_get_version_str() + " (" + bli_arch_string(bli_arch_query_id()) +
      (gemm_library_has_kernels() ? ")" : ": no kernels for this CPU, not used)");
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

}  // namespace fjit
