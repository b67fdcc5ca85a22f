# Runs an MPI job that must fail, and fails unless it exits non-zero within MAX_SECONDS with
# every regular expression of EXPECT (a ;-list, passed |-separated) in its output; @HOST@ in
# them stands for this machine's host name.
#   cmake -DCOMMAND=<mpiexec|args|...> -DMAX_SECONDS=30 -DEXPECT=<re1|re2> -P expect_job_failure.cmake
# The job is killed after twice MAX_SECONDS, so a hang fails the test instead of blocking CTest.
string(REPLACE "|" ";" command "${COMMAND}")
string(REPLACE "|" ";" expect "${EXPECT}")
cmake_host_system_information(RESULT host QUERY HOSTNAME)
string(REGEX REPLACE "([][+.*()^$?\\\\])" "\\\\\\1" host_re "${host}")
string(REPLACE "@HOST@" "${host_re}" expect "${expect}")
math(EXPR kill_after "${MAX_SECONDS} * 2")
string(TIMESTAMP start "%s" UTC)
execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE out
                ERROR_VARIABLE out TIMEOUT ${kill_after})
string(TIMESTAMP end "%s" UTC)
math(EXPR seconds "${end} - ${start}")
message("exit: ${result}; ${seconds} s\n--- output ---\n${out}--------------")
if(result STREQUAL "0")
  message(FATAL_ERROR "the job exited 0; it must fail")
endif()
if(NOT result MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not exit by itself: ${result}")
endif()
if(seconds GREATER MAX_SECONDS)
  message(FATAL_ERROR "the job took ${seconds} s to fail (limit ${MAX_SECONDS} s)")
endif()
foreach(re IN LISTS expect)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "the output lacks /${re}/")
  endif()
endforeach()
