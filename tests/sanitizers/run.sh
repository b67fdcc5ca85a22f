#!/usr/bin/env bash
# fjit's sanitized test runs (`make sanitize` runs both):
#   tests/sanitizers/run.sh address [BUILD_DIR]   ASan + UBSan: builds everything in BUILD_DIR
#       (default build-asan) with -DFJIT_SANITIZE=address and runs the CTest suite, MPI tests
#       included, except the packaging and compile-failure tests (they check how fjit is
#       installed and compiled, not what it does, and build it again unsanitized).
#   tests/sanitizers/run.sh thread [BUILD_DIR]    TSan: builds the tests that run replicas or
#       other threads in one process in BUILD_DIR (default build-tsan) with
#       -DFJIT_SANITIZE=thread and runs them; MPI tests are left out (their ranks are
#       processes, which TSan does not follow).
# Extra arguments after BUILD_DIR go to ctest (e.g. -R pmap). The builds and test runs are
# niced; set JOBS (default 2) for their parallelism and SANITIZE_LOCK to a lock file to hold
# while building and testing. A report fails the test that raised it; the suppression files
# next to this script hold only libraries fjit does not build, each entry with its reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
kind=${1:?usage: run.sh address|thread [BUILD_DIR] [ctest args...]}
shift
jobs=${JOBS:-2}
locked() {
  if [ -n "${SANITIZE_LOCK:-}" ]; then flock "$SANITIZE_LOCK" nice "$@"; else nice "$@"; fi
}

# The tests TSan runs: those of the threaded runtime (replicas, the replica pool,
# communicators and their collective worker, meshes and sharding, intra-op threads and the
# parallel kernels, step deadlines and stall reports, the timeline's and symbolizer's shared
# state, ZeRO's gathers and tensor parallelism over replicas), the README's tour on two thread
# replicas, and the canary that shows a race still fails the run. The other tests that run
# replicas (the trainers' features, the layers, the optimizers) reach threads only through
# these paths; they run under ASan, and unsanitized in make test.
tsan_tests=(pmap_test replica_pool_test communicator_test checks_replica_test checks_test
  mesh_test threads_test timeline_test reduce_update_test stack_trace_test jit_cache_test
  overlap_test donation_test determinism_test packed_gemm_test patches_gemm_test patches_products_test stall_report_test loop_guard_test
  fpe_checks_test step_deadline_test sharding_collectives_test zero_test zero_trainer_test
  shard_map_test tensor_parallel_lm_test train_e2e_test tsan_race_canary)

case $kind in
  address)
    build=${1:-$root/build-asan}
    shift $(( $# > 0 ? 1 : 0 ))
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFJIT_SANITIZE=address \
      -DFJIT_BUILD_BENCHMARKS=OFF > /dev/null
    locked cmake --build "$build" -j "$jobs"
    # Leaks are checked (LeakSanitizer) except in OpenMPI's own allocations (lsan.supp).
    export ASAN_OPTIONS="detect_leaks=1:strict_init_order=1:${ASAN_OPTIONS:-}"
    export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
    status=0
    # The multi-host tests (multihost_train_2hosts, elastic_restart_*: label multihost) are
    # left out: they test launching across two network namespaces, whose remote ranks do not
    # get the environment below, and run the same training code as the one-host MPI tests do
    # here (launch_test covers the launcher's own code).
    # Two long runs are left out for time, their code still runs under ASan elsewhere here:
    # train_lm_smoke (the LM job end to end; its program runs here in finetune_lm_smoke, and
    # its trainer, resume and checkpoint paths in lm_test, lm_verify_test and finetune_test) and
    # split_kernels_determinism_test (every kernel under every split; the same kernels run in
    # determinism_test, op_sweep_test, packed_gemm_test and bf16_gemm_test).
    locked ctest --test-dir "$build" -j "$jobs" --output-on-failure -LE multihost \
      -E "^package_|_fails_to_compile$|_mpi|mpi_|^multihost_|^train_lm_smoke$|^split_kernels_determinism_test$" \
      "$@" || status=1
    # The MPI tests, for what MPI adds: the communicator's collectives and sub-meshes, pmap,
    # sharding, ZeRO's reduce-scatter and gathers, join, the timeline, replay and the loop guard
    # across ranks (GoogleTest binaries at 2 ranks), the launcher's jobs (the tour, the
    # training command line, uneven data) and every failure test. The features that only ride
    # on those (the LM, ViT and CNN jobs, ZeRO for the LM, loss scaling, DP-SGD, certified
    # runs, determinism, lm_verify) run under ASan with thread replicas above, and over MPI at
    # 2 to 8 ranks in make test. OpenMPI's allocations are only recognisable (lsan.supp) with
    # full stacks and with its components kept loaded until exit.
    mpi_left_out="_mpi_test_np3$|^(zero_lm|loss_scale|lm_verify|train_e2e|dpsgd|certified_run|determinism)_mpi_test_np2$"
    mpi_left_out="$mpi_left_out|^(train_lm|finetune_lm|train_vit|train_cnn)_smoke_mpi_np2$"
    ASAN_OPTIONS="fast_unwind_on_malloc=0:$ASAN_OPTIONS" \
      OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1 \
      locked ctest --test-dir "$build" -j "$jobs" --output-on-failure -R "_mpi|mpi_" -E "$mpi_left_out" \
      -LE "ranks48|multihost" "$@" || status=1
    exit $status
    ;;
  thread)
    build=${1:-$root/build-tsan}
    shift $(( $# > 0 ? 1 : 0 ))
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFJIT_SANITIZE=thread \
      -DFJIT_BUILD_BENCHMARKS=OFF > /dev/null
    locked cmake --build "$build" -j "$jobs" --target "${tsan_tests[@]}" tour
    export TSAN_OPTIONS="suppressions=$here/tsan.supp:halt_on_error=1:second_deadlock_stack=1:${TSAN_OPTIONS:-}"
    # OpenMP workers wait for work by sleeping, not spinning: a spinning worker under TSan
    # takes the core from the one doing the work.
    export OMP_WAIT_POLICY=passive
    regex="^($(IFS='|'; echo "${tsan_tests[*]}")|tour_threads2)\$"
    locked ctest --test-dir "$build" -j "$jobs" --output-on-failure -R "$regex" "$@"
    ;;
  *)
    echo "run.sh: the first argument must be address or thread, not '$kind'" >&2
    exit 2
    ;;
esac
