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
if(FJIT_SANITIZE STREQUAL "thread")
  # OpenMP's orderings, which TSan cannot see in Debian's uninstrumented libgomp, annotated
  # around every parallel region and barrier fjit compiles (tests/sanitizers/tsan_openmp.cc).
  add_link_options(-Wl,--wrap=GOMP_parallel -Wl,--wrap=GOMP_barrier)
  add_library(fjit_tsan_openmp STATIC ${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan_openmp.cc)
  target_link_libraries(fjit_tsan_openmp PUBLIC OpenMP::OpenMP_CXX)
  # The GEMM micro-kernels only read packed panels and write the output tile their caller
  # owns; instrumenting their vector loads would make the TSan run many times slower while
  # the drivers that hand out tiles and panels (instrumented) are where a race would be.
  file(GLOB FJIT_TSAN_UNINSTRUMENTED ${PROJECT_SOURCE_DIR}/core/kernels/gemm/ukernel_*.cc)
  set_source_files_properties(${FJIT_TSAN_UNINSTRUMENTED} PROPERTIES COMPILE_OPTIONS -fno-sanitize=thread)
endif()
