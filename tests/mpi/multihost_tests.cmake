# The training job on two simulated hosts (tests/mpi/multihost_test.sh says what it checks):
# skipped (77) where the tests cannot make network namespaces (not root, no unshare or ip).
add_test(NAME multihost_train_2hosts
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/multihost_test.sh
          $<TARGET_FILE:train_fashion_mnist> ${CMAKE_SOURCE_DIR}/tests/data ${MPIEXEC_EXECUTABLE})
set_tests_properties(multihost_train_2hosts PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240)
