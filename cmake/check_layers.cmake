# The layer rule, run as a build step before any layer compiles (cmake -P, SOURCE_DIR set):
# core/ includes nothing from checks/ or parallel/, checks/ nothing from parallel/, and only
# parallel/ may include MPI. No layer includes what is built on top of the library (tests/,
# bench/, examples/): test-only helpers stay out of it. A violation fails the build and names
# the file and the line. No layer locks with abseil's synchronization primitives either:
# Debian's abseil is not built for ThreadSanitizer, which then cannot see those locks, so fjit
# locks with fjit::Mutex (core/runtime/mutex.h).
set(rules
  "core|checks/|parallel/|mpi.h|tests/|bench/|examples/|absl/synchronization/"
  "checks|parallel/|mpi.h|tests/|bench/|examples/|absl/synchronization/"
  "parallel|tests/|bench/|examples/|absl/synchronization/")
set(violations "")
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 layer)
  list(SUBLIST parts 1 -1 forbidden)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${layer}/*.h" "${SOURCE_DIR}/${layer}/*.cc"
       "${SOURCE_DIR}/${layer}/*.def" "${SOURCE_DIR}/${layer}/*.inc")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS lines)
      foreach(bad IN LISTS forbidden)
        if(line MATCHES "[<\"]${bad}")
          file(RELATIVE_PATH rel "${SOURCE_DIR}" "${f}")
          string(APPEND violations "\n  ${rel}: ${line}  (${layer}/ may not include ${bad})")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "fjit layering (core < checks < parallel) or locking rule is broken:${violations}")
endif()
file(TOUCH "${STAMP}")
