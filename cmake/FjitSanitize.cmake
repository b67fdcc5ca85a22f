# FJIT_SANITIZE builds everything fjit builds (libraries, tests, examples, benchmarks) under a
# sanitizer; use a build directory of its own for each (`make sanitize` uses build-asan and
# build-tsan, tests/sanitizers/README.md says how they are run).
#   address  AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer; undefined
#            behaviour aborts the test instead of printing and going on
#   thread   ThreadSanitizer
# Only fjit's own code is instrumented: Debian's libraries (OpenMPI, abseil, libgomp, ...)
# are not, which is what the suppression files in tests/sanitizers/ are about.
set(FJIT_SANITIZE "" CACHE STRING "Build under a sanitizer: address (ASan + UBSan) or thread (TSan)")
set_property(CACHE FJIT_SANITIZE PROPERTY STRINGS "" address thread)
if(FJIT_SANITIZE STREQUAL "address")
  set(FJIT_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
elseif(FJIT_SANITIZE STREQUAL "thread")
  set(FJIT_SANITIZER_FLAGS -fsanitize=thread)
elseif(NOT FJIT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "FJIT_SANITIZE must be address or thread (or empty), not '${FJIT_SANITIZE}'")
endif()
if(FJIT_SANITIZER_FLAGS)
  add_compile_options(${FJIT_SANITIZER_FLAGS} -fno-omit-frame-pointer)
  add_link_options(${FJIT_SANITIZER_FLAGS})
  # -O1, as the sanitizers' documentation advises: about half the compile time of -O3 here,
  # precise stack traces, and still fast enough for the suite's timeouts.
  set(CMAKE_CXX_FLAGS_RELEASE "-O1 -g -DNDEBUG")
endif()
