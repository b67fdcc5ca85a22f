#!/usr/bin/env bash
# Runs the bench/ suite from a build directory and prints every figure (make bench).
# The MPI benchmark runs under mpiexec with 2 ranks. Record results in bench/RESULTS.md.
set -euo pipefail
BUILD=${1:-build}
for b in core_bench train_step_bench checks_bench; do
  echo "== $b"; "$BUILD/bench/$b" --benchmark_min_time=1
done
echo "== allreduce_bench (mpiexec -n 2)"
mpiexec -n 2 --allow-run-as-root --bind-to none "$BUILD/bench/allreduce_bench"
