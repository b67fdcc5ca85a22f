#!/usr/bin/env bash
# Clean build times on this machine: a fresh clone of the repository at $1 (default: this
# checkout), ccache off, one configure and three builds in a row (the library, what `make
# demo` builds, everything), then the demo until its first progress line. Prints one line of
# cumulative seconds, the figures bench/RESULTS.md records.
#   bash bench/build_times.sh [REPO]
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/src"
cd "$work/src"
export CCACHE_DISABLE=1
now() { date +%s.%N; }
t0=$(now)
cmake -S . -B b -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" 2>&1
t1=$(now)
cmake --build b -j 2 --target fjit_parallel > "$work/library.log" 2>&1
t2=$(now)
cmake --build b -j 2 --target train_fashion_mnist > "$work/demo.log" 2>&1
t3=$(now)
# The demo's first progress line, as `make demo` would print it after its build.
first=""
while read -r line; do
  if [[ "$line" == epoch*step* ]]; then first=$(now); break; fi
done < <(timeout 120 stdbuf -oL b/examples/train_fashion_mnist --replicas 2 2>&1)
t4=$(now)
cmake --build b -j 2 > "$work/all.log" 2>&1
t5=$(now)
python3 - "$t0" "$t1" "$t2" "$t3" "${first:-0}" "$t4" "$t5" <<'PY'
import sys
t0, t1, t2, t3, first, t4, t5 = map(float, sys.argv[1:])
demo_line = (t3 - t0) + (first - t3) if first else float("nan")
print(f"configure {t1 - t0:.0f}s | library {t2 - t0:.0f}s | demo {t3 - t0:.0f}s | "
      f"first training line {demo_line:.0f}s | everything {(t3 - t0) + (t5 - t4):.0f}s")
PY
