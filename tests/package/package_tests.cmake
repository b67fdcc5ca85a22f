# CTest entries that consume fjit as a downstream project does (package/package_test.sh):
# installed, through find_package and pkg-config (built, linked and run); and added from source
# with FetchContent (configured, and the consumer compiled against fjit's targets).
add_test(NAME package_find_package
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/package/package_test.sh install ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
add_test(NAME package_fetchcontent
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/package/package_test.sh fetchcontent ${PROJECT_SOURCE_DIR})
set_tests_properties(package_find_package PROPERTIES TIMEOUT 600)
set_tests_properties(package_fetchcontent PROPERTIES TIMEOUT 300)
