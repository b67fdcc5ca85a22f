# Finds what fjit's libraries need, all from Debian's packages (see `make deps`). The tests'
# and benchmarks' own dependencies (GoogleTest, Google Benchmark) are found only when they are
# built (CMakeLists.txt). cmake/fjitConfig.cmake.in finds the same set for installed fjit.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(absl REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)
# SHA-256 of checkpointed state for the hash chain of certified runs (core/io/state_hash.h).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# The trainer's command line (parallel/train/train_options.cc); header-only.
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBDW REQUIRED IMPORTED_TARGET libdw)
# Eigen's GEMM uses OpenMP for intra-op threads (core/base/threads.h); libgomp comes with g++.
find_package(OpenMP REQUIRED COMPONENTS CXX)
include(GNUInstallDirs)
# BLIS (libblis-dev) computes the plain products when found (core/kernels/gemm/gemm_library.h);
# without it, or with -DFJIT_BLIS=OFF, fjit's own Eigen-based driver computes them all.
option(FJIT_BLIS "Use BLIS for plain matrix products when it is installed" ON)
if(FJIT_BLIS)
  find_path(FJIT_BLIS_INCLUDE_DIR blis.h)
  find_library(FJIT_BLIS_LIBRARY blis)
endif()
if(FJIT_BLIS AND FJIT_BLIS_INCLUDE_DIR AND FJIT_BLIS_LIBRARY)
  set(FJIT_HAVE_BLIS ON)
  message(STATUS "fjit: plain products on BLIS (${FJIT_BLIS_LIBRARY})")
else()
  set(FJIT_HAVE_BLIS OFF)
  message(STATUS "fjit: BLIS not used (FJIT_BLIS=${FJIT_BLIS}; apt-get install libblis-dev)")
endif()
