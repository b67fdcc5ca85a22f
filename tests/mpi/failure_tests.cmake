# CTest entries for jobs that must fail quickly (included by tests/CMakeLists.txt): a rank that
# throws makes mpiexec exit non-zero, and a stalled rank is reported, then the job aborted.
# In the expected output, @HOST@ stands for this machine's host name (expect_job_failure.cmake),
# and "." for the report's "; " (a semicolon would split the CMake list).
add_executable(mpi_rank_failure ${CMAKE_CURRENT_SOURCE_DIR}/mpi/rank_failure_main.cc)
target_link_libraries(mpi_rank_failure PRIVATE fjit)

# fjit_mpi_failure_test(NAME NP "MODE|RANK" "RE1|RE2...") runs mpi_rank_failure MODE RANK on NP
# ranks under stall limits of 0.3 s (warn) and 1.5 s (abort); the job must fail within 30 s.
# The waits are matched as any figure: a loaded machine (a sanitizer build) reports 0.31 s.
function(fjit_mpi_failure_test name np args expect)
  set(command ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --allow-run-as-root
      --oversubscribe --bind-to none ${MPIEXEC_PREFLAGS} $<TARGET_FILE:mpi_rank_failure>)
  string(REPLACE ";" "|" command "${command}")
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${command}|${args}" -DMAX_SECONDS=30 "-DEXPECT=${expect}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_job_failure.cmake)
  set_tests_properties(${name} PROPERTIES TIMEOUT 90
    ENVIRONMENT "OMPI_MCA_btl=self,vader;OMPI_MCA_rmaps_base_oversubscribe=1;FJIT_STALL_WARN_S=0.3;FJIT_STALL_ABORT_S=1.5")
endfunction()

fjit_mpi_failure_test(mpi_rank_throws_np2 2 "throw|1"
  "rank 1: uncaught exception \\(std::runtime_error\\): injected failure on rank 1")
# A stall names the ranks that have not arrived and their host, and the ranks waiting, in the
# warning of every waiting rank and in the abort. A rank that cannot answer sends no host
# stacks either; the abort names it.
set(on "\\(on @HOST@\\)")
fjit_mpi_failure_test(mpi_rank_stalls_np2 2 "hang|1"
  "stall: rank 0 of 2 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in barrier #1. not arrived: rank 1 ${on}. waiting in it: rank 0 ${on}|aborting the job \\(rank 0 of 2, mpi\\): stall: rank 0 ${on} waited [0-9.]+ s in barrier #1 \\(abort_after 1500 ms\\). not arrived: rank 1 ${on}. waiting in it: rank 0 ${on}|rank 1 ${on}: no host stack within [0-9.]+ s")
fjit_mpi_failure_test(mpi_rank_stalls_np3 3 "hang|2"
  "stall: rank 0 of 3 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in barrier #1. not arrived: rank 2 ${on}. waiting in it: ranks 0,1 ${on}|stall: rank 1 of 3 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in barrier #1. not arrived: rank 2 ${on}. waiting in it: ranks 0,1 ${on}|aborting the job \\(rank [01] of 3, mpi\\): stall: rank [01] ${on} waited [0-9.]+ s in barrier #1 \\(abort_after 1500 ms\\). not arrived: rank 2 ${on}. waiting in it: ranks 0,1 ${on}")
# The same in an all-reduce through the shared-memory window (its barrier answers roll calls).
fjit_mpi_failure_test(mpi_rank_stalls_in_reduce_np2 2 "reduce-hang|0"
  "stall: rank 1 of 2 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in all_reduce #2. not arrived: rank 0 ${on}. waiting in it: rank 1 ${on}|aborting the job \\(rank 1 of 2, mpi\\)")
fjit_mpi_failure_test(mpi_rank_stalls_in_reduce_np3 3 "reduce-hang|1"
  "stall: rank 0 of 3 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in all_reduce #2. not arrived: rank 1 ${on}. waiting in it: ranks 0,2 ${on}|stall: rank 2 of 3 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in all_reduce #2. not arrived: rank 1 ${on}. waiting in it: ranks 0,2 ${on}|aborting the job \\(rank [02] of 3, mpi\\): stall: .*not arrived: rank 1 ${on}")
# Nobody is missing, but one rank waits in another collective: the report says which.
fjit_mpi_failure_test(mpi_rank_mismatch_np3 3 "mismatch|2"
  "stall: rank 0 of 3 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in barrier #1. not arrived: none \\(every rank answered\\). waiting in it: ranks 0,1 ${on}. in other collectives: rank 2 ${on} in all_gather #1|stall: rank 2 of 3 \\(mpi, on @HOST@\\) has waited [0-9.]+ s in all_gather #1. not arrived: none \\(every rank answered\\). waiting in it: rank 2 ${on}. in other collectives: rank 0 ${on} in barrier #1, rank 1 ${on} in barrier #1")

# Stuck ranks say what they are doing: rank 1 asleep inside its matmul (a long kernel that
# polls) or just before its psum answers the roll call with its instruction; the waiting rank
# gives its collective; both list their host stacks. The abort message holds the stuck rank's
# host stacks, sent after its answer: its thread asleep in the executor's test seam
# (maybe_sleep_in), inside the step that the test's sleep_in_a_step runs, a frame no waiting
# rank has; at three ranks, also the other waiting rank's (in the all-reduce kernel).
fjit_mpi_failure_test(mpi_rank_in_long_kernel_np2 2 "kernel-sleep|1"
  "rank 1 ${on} answered while computing: in instruction [0-9]+ of [0-9]+: matmul f32\\[2,5\\] <- f32\\[2,3\\], f32\\[3,5\\], at [^ ]*tests/mpi/rank_failure_main.cc:[0-9]+ in |rank 0 \\(on @HOST@, this rank\\): .*waiting in all_reduce #[0-9]+ \\(axis 'batch', 4 bytes\\) for the other replicas|host stacks \\(pid [0-9]+\\):.  +thread [0-9]+|aborting the job \\(rank 0 of 2, mpi\\): stall: .*answered while computing: in instruction|host stacks of rank 1 \\(pid [0-9]+, sent after its answer\\):.  +thread [0-9]+ .*maybe_sleep_in.*#[0-9]+ sleep_in_a_step \\(tests/mpi/rank_failure_main.cc:[0-9]+\\)")
fjit_mpi_failure_test(mpi_rank_before_collective_np3 3 "collective-sleep|2"
  "rank 2 ${on} answered while computing: in instruction [0-9]+ of [0-9]+: all_reduce f32\\[\\] <- f32\\[\\], at [^ ]*tests/mpi/rank_failure_main.cc:[0-9]+ in (.*)\\(axis 'batch'\\).*not in a collective|rank [01] \\(on @HOST@\\): .*waiting in all_reduce #[0-9]+ \\(axis 'batch', 4 bytes\\)|aborting the job \\(rank [01] of 3, mpi\\): stall: |host stacks of rank 2 \\(pid [0-9]+, sent after its answer\\):.  +thread [0-9]+ .*maybe_sleep_in.*#[0-9]+ sleep_in_a_step \\(tests/mpi/rank_failure_main.cc:[0-9]+\\)|host stacks of rank [01] \\(pid [0-9]+, sent after its answer\\):.  +thread [0-9]+ .*all_reduce_kernel.*#[0-9]+ sleep_in_a_step")
