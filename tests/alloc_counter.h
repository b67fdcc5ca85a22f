// Heap allocation counting for the test and benchmark binaries that link fjit_alloc_counter
// (tests/alloc_counter.cc): that library replaces malloc, calloc, realloc, aligned_alloc and
// posix_memalign with versions that count the call and forward to glibc (__libc_malloc and
// friends), so every allocation in the process is seen, fjit's, Eigen's and the C++ runtime's
// alike. free is not replaced: only allocations are counted. Under AddressSanitizer or
// ThreadSanitizer, which own the allocator, the same counting is done by a hook the
// sanitizer calls on every allocation (__sanitizer_install_malloc_and_free_hooks).
//
// Linking the library is what installs the hooks (a binary that calls one of the functions
// below pulls in the object that defines them), so only binaries that count allocations link
// it. The counters only ever grow; measure a stretch as the difference of two readings.
#pragma once

namespace fjit::testing {

// Allocations made by every thread since the process started.
long allocations();
// Allocations made by the calling thread since it started (for replicas on threads of one
// process, each checking its own steady state while the others run).
long thread_allocations();

}  // namespace fjit::testing
