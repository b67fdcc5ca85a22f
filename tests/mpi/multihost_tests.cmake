# The training job on two simulated hosts (tests/mpi/multihost_test.sh says what it checks):
# skipped (77) where the tests cannot make network namespaces (not root, no unshare or ip).
add_test(NAME multihost_train_2hosts
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/multihost_test.sh
          $<TARGET_FILE:train_fashion_mnist> ${CMAKE_SOURCE_DIR}/tests/data ${MPIEXEC_EXECUTABLE})
set_tests_properties(multihost_train_2hosts PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
                     LABELS "mpi;multihost")
# fjit_launch's elastic restart on the same two simulated hosts (tests/mpi/elastic_test.sh):
# one host's processes killed, and the link between the hosts taken down.
foreach(mode kill split)
  add_test(NAME elastic_restart_${mode}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/elastic_test.sh ${mode}
            $<TARGET_FILE:train_fashion_mnist> ${CMAKE_SOURCE_DIR}/tests/data ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:fjit_launch>)
  set_tests_properties(elastic_restart_${mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
                       LABELS "mpi;multihost")
endforeach()
