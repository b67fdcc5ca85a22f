# Install rules: the layer libraries and the umbrella as exported targets (fjit::core,
# fjit::io, fjit::checks, fjit::parallel, fjit::train, fjit::fjit), the public headers under
# include/fjit/ (those fjit.h reaches, cmake/install_public_headers.cmake; so
# "core/ir/array.h" and "fjit.h" resolve with include/fjit on the path), the generated version
# header, fjitConfig.cmake with its version file, and fjit.pc for pkg-config. Nothing here
# passes compiler flags on: the public headers include no Eigen or intrinsics, so a consumer
# compiles for whatever CPU it targets.
include(CMakePackageConfigHelpers)

install(TARGETS fjit_core fjit_io fjit_checks fjit_parallel fjit_train fjit EXPORT fjitTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fjit)
install(CODE "
  set(SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(DESTINATION \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/fjit\")
  set(ROOTS parallel/fjit.h)
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_public_headers.cmake\")")
install(FILES ${FJIT_GENERATED_DIR}/core/base/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fjit/core/base)

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
# The prefix is found from where fjit.pc lies, so `cmake --install --prefix P` works for any P.
file(RELATIVE_PATH FJIT_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" FJIT_PC_TO_PREFIX "${FJIT_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/fjit.pc.in ${PROJECT_BINARY_DIR}/fjit.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fjit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
