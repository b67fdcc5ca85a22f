# Installs fjit's public headers, run by `cmake --install` (FjitInstall.cmake). The public
# headers are exactly those that the umbrella header fjit.h reaches through its quoted
# #include lines: what a consumer's #include "fjit.h" compiles. Every other header (kernel
# internals, compiler passes, backend details) stays out of the installed tree. The walk runs
# at install time, so the installed set follows the includes as they are when installing.
# Expects SOURCE_DIR, DESTINATION (the include/fjit folder) and ROOTS (paths under SOURCE_DIR).
set(pending ${ROOTS})
set(public "")
while(pending)
  list(POP_FRONT pending header)
  # list(FIND), not if(IN_LIST): an install script runs with CMake's oldest policies.
  list(FIND public "${header}" seen)
  if(NOT seen EQUAL -1)
    continue()
  endif()
  list(APPEND public "${header}")
  file(STRINGS "${SOURCE_DIR}/${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" included "${line}")
    if(EXISTS "${SOURCE_DIR}/${included}")
      list(APPEND pending "${included}")
    endif()
  endforeach()
endwhile()
list(SORT public)
foreach(header IN LISTS public)
  get_filename_component(dir "${header}" DIRECTORY)
  if(header STREQUAL "parallel/fjit.h")
    set(dir "")  # the umbrella sits at the top: #include "fjit.h"
  endif()
  file(INSTALL "${SOURCE_DIR}/${header}" DESTINATION "${DESTINATION}/${dir}")
endforeach()
