// The counting allocation hooks declared in tests/alloc_counter.h. Each one bumps both
// counters and forwards to glibc's own entry point; nothing here may allocate.
#include "tests/alloc_counter.h"

#include <atomic>
#include <cerrno>
#include <cstddef>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<long> g_allocations{0};
thread_local long t_allocations = 0;  // constant-initialised: reading it allocates nothing

void count() {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  ++t_allocations;
}
}  // namespace

extern "C" {
void* malloc(size_t n) { count(); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { count(); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { count(); return __libc_realloc(p, n); }
void* aligned_alloc(size_t a, size_t n) { count(); return __libc_memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  count();
  *out = __libc_memalign(a, n);
  return *out ? 0 : ENOMEM;
}
}

namespace fjit::testing {
long allocations() { return g_allocations.load(); }
long thread_allocations() { return t_allocations; }
}  // namespace fjit::testing
