#!/usr/bin/env bash
# Consumes fjit as a downstream project would (consumer/main.cc): installed, the consumer is
# built and run; added from source, it is configured and compiled.
#   package_test.sh install BUILD_DIR SOURCE_DIR   cmake --install into a temporary prefix;
#       a CMake consumer with find_package(fjit), then a plain g++ line with pkg-config fjit
#   package_test.sh fetchcontent SOURCE_DIR        a CMake consumer that adds fjit's sources
#       with FetchContent (add_subdirectory underneath), does not set C++20 itself, and
#       compiles against fjit's targets
set -euo pipefail
mode=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

case "$mode" in
  install)
    build=$2
    SOURCE=$3
    cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
    for f in lib/cmake/fjit/fjitConfig.cmake lib/cmake/fjit/fjitConfigVersion.cmake \
             lib/pkgconfig/fjit.pc include/fjit/fjit.h include/fjit/core/base/version.h \
             include/fjit/core/ir/ops.def lib/libfjit_core.a bin/fjit_timeline bin/fjit_verify bin/fjit_launch; do
      p=$(find "$work/prefix" -path "*/${f#lib/}" -o -path "*/$f" | head -n 1)
      [ -n "$p" ] || { echo "not installed: $f"; exit 1; }
    done
    # Only the public headers (what fjit.h reaches) are installed: compiled programs, compiler
    # passes and backend internals stay out, and the consumers below compile without them.
    for f in core/lib/optimizer_compiled.h core/kernels/fused/compiled_loop.h \
             core/compile/passes/pass.h core/kernels/gemm/gemm_epilogue.h parallel/mpi_communicator.h; do
      [ -e "$SOURCE/$f" ] || { echo "package_test.sh: $f is no longer in the source tree; name another internal header"; exit 1; }
      if [ -n "$(find "$work/prefix" -path "*/include/fjit/$f")" ]; then echo "internal header installed: $f"; exit 1; fi
    done
    cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DFJIT_CONSUME=find_package "${launcher[@]}" > "$work/cfg.log" \
      || { cat "$work/cfg.log"; exit 1; }
    cmake --build "$work/consumer" -j 2 > "$work/build.log" || { cat "$work/build.log"; exit 1; }
    (cd "$work" && "$work/consumer/consumer")
    pcdir=$(dirname "$(find "$work/prefix" -name fjit.pc | head -n 1)")
    flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs fjit)
    # shellcheck disable=SC2086
    g++ -O1 "$here/consumer/main.cc" -o "$work/pc_consumer" $flags
    (cd "$work" && "$work/pc_consumer")
    echo "find_package and pkg-config consumers: ok"
    ;;
  fetchcontent)
    src=$2
    # What a subproject build adds is checked: the configure (no leaked targets), and the
    # consumer compiled against fjit's targets (C++20, include folders and definitions come
    # with them). The libraries are not compiled again: the same sources are compiled, linked
    # and run by the rest of the suite, and the installed package's test links and runs this
    # consumer. (The per-object target is the Makefile generator's.)
    cmake -G "Unix Makefiles" -S "$here/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
      -DFJIT_CONSUME=fetchcontent -DFJIT_SOURCE="$src" "${launcher[@]}" > "$work/cfg.log" \
      || { cat "$work/cfg.log"; exit 1; }
    cmake --build "$work/consumer" --target main.cc.o > "$work/build.log" \
      || { tail -50 "$work/build.log"; exit 1; }
    [ -s "$(find "$work/consumer" -name main.cc.o | head -n 1)" ] || { echo "main.cc.o not built"; exit 1; }
    echo "FetchContent consumer: configured and compiled, ok"
    ;;
  *) echo "usage: $0 install BUILD SOURCE | fetchcontent SOURCE" >&2; exit 2 ;;
esac
