# CTest entries for jobs that must fail quickly (included by tests/CMakeLists.txt): a rank that
# throws makes mpiexec exit non-zero, and a stalled rank is reported, then the job aborted.
add_executable(mpi_rank_failure ${CMAKE_CURRENT_SOURCE_DIR}/mpi/rank_failure_main.cc)
target_link_libraries(mpi_rank_failure PRIVATE fjit)
set(FJIT_MPIEXEC_ARGS ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --allow-run-as-root
    --oversubscribe --bind-to none ${MPIEXEC_PREFLAGS} $<TARGET_FILE:mpi_rank_failure>)
string(REPLACE ";" "|" FJIT_MPIEXEC_ARGS "${FJIT_MPIEXEC_ARGS}")

add_test(NAME mpi_rank_throws_np2
  COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${FJIT_MPIEXEC_ARGS}|throw|1" -DMAX_SECONDS=30
          "-DEXPECT=rank 1: uncaught exception \\(std::runtime_error\\): injected failure on rank 1"
          -P ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_job_failure.cmake)
add_test(NAME mpi_rank_stalls_np2
  COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${FJIT_MPIEXEC_ARGS}|hang|1" -DMAX_SECONDS=30
          "-DEXPECT=stall: rank 0 of 2 \\(mpi\\) has waited 0.30 s in barrier #1|aborting the job \\(rank 0 of 2, mpi\\): stall: rank 0 waited"
          -P ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_job_failure.cmake)
set_tests_properties(mpi_rank_throws_np2 PROPERTIES TIMEOUT 90
  ENVIRONMENT "OMPI_MCA_btl=self,vader;OMPI_MCA_rmaps_base_oversubscribe=1")
set_tests_properties(mpi_rank_stalls_np2 PROPERTIES TIMEOUT 90
  ENVIRONMENT "OMPI_MCA_btl=self,vader;OMPI_MCA_rmaps_base_oversubscribe=1;FJIT_STALL_WARN_S=0.3;FJIT_STALL_ABORT_S=1.5")
