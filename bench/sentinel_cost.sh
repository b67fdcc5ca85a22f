#!/bin/bash
# bench/sentinel_cost.sh: run under the build lock from the repository root, after building train_fashion_mnist:
#   flock /work/build.lock bench/sentinel_cost.sh
# Interleaved: sentinel off, K=100000 (never due after step 0), K=1, K=100; MLP, batch 128,
# 2 thread replicas, one core (taskset, 1 intra-op thread). Prints ExecuteTime p50/mean.
cd "$(dirname "$0")/.."
for i in 1 2 3; do
  for k in 0 100000 1 100; do
    FJIT_INTRA_OP_THREADS=1 taskset -c 1 ./build/examples/train_fashion_mnist --replicas 2 --max-steps 800 --sentinel $k --log-every 0 "$@" 2>&1 | grep -E "^trained|ExecuteTime" | tr '\n' ' ' | sed "s/^/K=$k /"; echo
  done
done
