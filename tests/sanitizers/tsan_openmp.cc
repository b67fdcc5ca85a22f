// ThreadSanitizer builds only (FJIT_SANITIZE=thread): tells TSan how OpenMP orders memory.
//
// Debian's libgomp is not built with TSan, so TSan cannot see that a parallel region's start
// orders the calling thread's writes before the workers' reads, that the region's end orders
// the workers' writes before what the caller does next, or that a barrier orders every team
// member's writes before the others continue. Without that, each output a worker writes and
// the caller then reads is reported as a race.
//
// The TSan build links fjit with `-Wl,--wrap=GOMP_parallel,--wrap=GOMP_barrier`
// (cmake/FjitSanitize.cmake): every parallel region and explicit or loop-end barrier that fjit
// compiles calls the wrappers below, which annotate exactly those three orderings and nothing
// more. Two regions never share a sync address while both run, and worker-to-worker order is
// given only by barriers, so a race between two workers of one region, or between replica
// threads, is still reported.
#include <sanitizer/tsan_interface.h>

extern "C" {

void __real_GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
void __real_GOMP_barrier();

namespace {

struct Region {
  void (*fn)(void*);
  void* data;
  // Distinct sync addresses. Barriers alternate between two, so a member still leaving
  // barrier k never acquires what another member released on arriving at barrier k + 1.
  char fork, join, barrier[2];
};

struct Member {
  Region* region = nullptr;  // the region the calling thread works in, if any
  unsigned barriers = 0;     // the barriers it has passed in that region
};
thread_local Member t_member;

void run_member(void* p) {
  Region* r = static_cast<Region*>(p);
  const Member outer = t_member;
  t_member = Member{r, 0};
  __tsan_acquire(&r->fork);
  r->fn(r->data);
  __tsan_release(&r->join);
  t_member = outer;
}

}  // namespace

void __wrap_GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  Region r{fn, data, 0, 0, {0, 0}};
  __tsan_release(&r.fork);
  __real_GOMP_parallel(run_member, &r, num_threads, flags);
  __tsan_acquire(&r.join);
}

void __wrap_GOMP_barrier() {
  Member& m = t_member;
  char* sync = m.region != nullptr ? &m.region->barrier[m.barriers++ % 2] : nullptr;
  if (sync != nullptr) __tsan_release(sync);
  __real_GOMP_barrier();
  if (sync != nullptr) __tsan_acquire(sync);
}

}  // extern "C"
