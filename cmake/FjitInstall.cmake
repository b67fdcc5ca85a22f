# Install rules: the layer libraries and the umbrella as exported targets (fjit::core,
# fjit::io, fjit::checks, fjit::parallel, fjit::train, fjit::fjit), every header under include/fjit/
# (so "core/ir/array.h" and "fjit.h" resolve with include/fjit on the path), the generated
# version header, fjitConfig.cmake with its version file, and fjit.pc for pkg-config.
include(CMakePackageConfigHelpers)

install(TARGETS fjit_core fjit_io fjit_checks fjit_parallel fjit_train fjit EXPORT fjitTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fjit)
foreach(layer core checks parallel)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fjit/${layer}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/parallel/fjit.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fjit)
install(FILES ${FJIT_GENERATED_DIR}/core/base/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fjit/core/runtime)

set(FJIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fjit)
install(EXPORT fjitTargets NAMESPACE fjit:: DESTINATION ${FJIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fjitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fjitConfig.cmake INSTALL_DESTINATION ${FJIT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fjitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fjitConfig.cmake ${PROJECT_BINARY_DIR}/fjitConfigVersion.cmake
  DESTINATION ${FJIT_CMAKE_DIR})

set(FJIT_PC_BLIS "")
if(FJIT_HAVE_BLIS)
  set(FJIT_PC_BLIS "-lblis")
endif()
set(FJIT_PC_NATIVE "")
if(FJIT_NATIVE)
  set(FJIT_PC_NATIVE "-march=native")
endif()
# The prefix is found from where fjit.pc lies, so `cmake --install --prefix P` works for any P.
file(RELATIVE_PATH FJIT_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" FJIT_PC_TO_PREFIX "${FJIT_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/fjit.pc.in ${PROJECT_BINARY_DIR}/fjit.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fjit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
