// The counting allocation hooks declared in tests/alloc_counter.h. Each one bumps both
// counters; nothing here may allocate.
//
// Plain builds replace the allocation functions and forward to glibc's own entry points.
// Under AddressSanitizer or ThreadSanitizer that replacement would run before the
// sanitizer's allocator is initialized (and hide allocations from it), so there the
// sanitizer's allocator calls a hook installed at start-up instead: it sees every
// allocation of the process too, operator new's included.
#include "tests/alloc_counter.h"

#include <atomic>
#include <cerrno>
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FJIT_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FJIT_SANITIZER_ALLOCATOR 1
#endif
#endif

#ifdef FJIT_SANITIZER_ALLOCATOR
// Declared here because g++ ships no <sanitizer/allocator_interface.h>; ASan's and TSan's
// runtimes (g++'s and clang's) both define it. Returns non-zero when the hooks were installed.
extern "C" int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void*, size_t), void (*free_hook)(const volatile void*));
#endif

namespace {
std::atomic<long> g_allocations{0};
thread_local long t_allocations = 0;  // constant-initialised: reading it allocates nothing

void count() {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  ++t_allocations;
}
}  // namespace

#ifdef FJIT_SANITIZER_ALLOCATOR

namespace {
void on_malloc(const volatile void*, size_t) { count(); }
void on_free(const volatile void*) {}

// Installed while static objects are constructed, before main and before any test runs.
[[maybe_unused]] const int g_hooks_installed =
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace

#else  // replace the allocation functions

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

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

#endif

namespace fjit::testing {
long allocations() { return g_allocations.load(); }
long thread_allocations() { return t_allocations; }
}  // namespace fjit::testing
