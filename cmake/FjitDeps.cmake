# Finds fjit's dependencies, all from Debian's packages (see `make deps`).
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(absl REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBDW REQUIRED IMPORTED_TARGET libdw)
# Eigen's GEMM uses OpenMP for intra-op threads (core/threads.h); libgomp comes with g++.
find_package(OpenMP REQUIRED COMPONENTS CXX)
