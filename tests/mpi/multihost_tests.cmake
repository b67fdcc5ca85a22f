# The training job on two and on four simulated hosts (tests/mpi/multihost_test.sh says what
# it checks): skipped (77) where the tests cannot make network namespaces (not root, no
# unshare or ip).
foreach(hosts 2 4)
  add_test(NAME multihost_train_${hosts}hosts
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/multihost_test.sh
            $<TARGET_FILE:train_fashion_mnist> ${CMAKE_SOURCE_DIR}/tests/data ${MPIEXEC_EXECUTABLE} ${hosts})
  set_tests_properties(multihost_train_${hosts}hosts PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
                       LABELS "mpi;multihost" RUN_SERIAL TRUE)
endforeach()
# Every MPI test program with its ranks on four simulated hosts (tests/mpi/multihost_gtests.sh).
set(fjit_mpi_test_files)
foreach(src ${FJIT_MPI_TESTS})
  get_filename_component(name ${src} NAME_WE)
  list(APPEND fjit_mpi_test_files $<TARGET_FILE:${name}>)
endforeach()
add_test(NAME multihost_mpi_tests_4hosts
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/multihost_gtests.sh ${MPIEXEC_EXECUTABLE} 4 ${fjit_mpi_test_files})
set_tests_properties(multihost_mpi_tests_4hosts PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
                     LABELS "mpi;multihost" RUN_SERIAL TRUE)
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
