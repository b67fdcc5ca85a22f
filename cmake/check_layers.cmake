# The layer and stage rules, run as a build step before any layer compiles (cmake -P,
# SOURCE_DIR set). A violation fails the build and names the file, the line and the rule.
#
# Layers: core/ includes nothing from checks/ or parallel/, checks/ nothing from parallel/, and
# only parallel/ may include MPI. No layer includes what is built on top of the library
# (tests/, bench/, examples/): test-only helpers stay out of it. No layer locks with abseil's
# synchronization primitives either: Debian's abseil is not built for ThreadSanitizer, which
# then cannot see those locks, so fjit locks with fjit::Mutex (core/base/mutex.h).
#
# Stages inside core/, lowest first; a folder includes only from its own stage or a lower one,
# never from a peer on the same floor:
#   base < ir < {trace, kernels} < {autodiff, compile} < {runtime, lib} < {nn, io} < hf
# base/ holds what includes nothing of fjit (logging, configuration, locks, threads, metrics,
# the timeline), so every stage may use it. nn/ (layers: composites of ops) and io/ (data
# sets, files, checkpoints, progress and scalar logs; the fjit_io target) sit on the top
# floor: no stage below includes them, and they do not include each other. hf/ (Hugging Face
# checkpoints, built into fjit_io) maps files onto the decoder: it includes both, above them.
set(rules
  "core|checks/|parallel/|mpi.h|tests/|bench/|examples/|absl/synchronization/"
  "checks|parallel/|mpi.h|tests/|bench/|examples/|absl/synchronization/"
  "parallel|tests/|bench/|examples/|absl/synchronization/")
set(stages base:0 ir:1 trace:2 kernels:2 autodiff:3 compile:3 runtime:4 lib:4 nn:5 io:5 hf:6)
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

# The floor of each stage folder; a folder of core/ missing from the list is itself an error,
# so a new stage is placed on purpose.
foreach(entry IN LISTS stages)
  string(REPLACE ":" ";" pair "${entry}")
  list(GET pair 0 name)
  list(GET pair 1 floor)
  set(floor_${name} ${floor})
endforeach()
file(GLOB core_dirs LIST_DIRECTORIES true "${SOURCE_DIR}/core/*")
foreach(dir IN LISTS core_dirs)
  if(IS_DIRECTORY "${dir}")
    get_filename_component(stage "${dir}" NAME)
    if(NOT DEFINED floor_${stage})
      string(APPEND violations "\n  core/${stage}/: a folder with no place in the stage order "
             "(add it to `stages` in cmake/check_layers.cmake)")
      continue()
    endif()
    file(GLOB_RECURSE files "${dir}/*.h" "${dir}/*.cc" "${dir}/*.def" "${dir}/*.inc")
    foreach(f IN LISTS files)
      file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"core/")
      foreach(line IN LISTS lines)
        string(REGEX REPLACE ".*\"core/([a-z_]+)/.*" "\\1" target "${line}")
        if(target STREQUAL stage)
          continue()
        endif()
        if(NOT DEFINED floor_${target} OR NOT floor_${target} LESS floor_${stage})
          file(RELATIVE_PATH rel "${SOURCE_DIR}" "${f}")
          string(APPEND violations "\n  ${rel}: ${line}  (core/${stage}/ may include only "
                 "lower stages: base < ir < trace, kernels < autodiff, compile < runtime, lib < nn, io < hf)")
        endif()
      endforeach()
    endforeach()
  endif()
endforeach()

if(violations)
  message(FATAL_ERROR "fjit layering (core < checks < parallel, and core's stage order) or "
          "locking rule is broken:${violations}")
endif()
file(TOUCH "${STAMP}")
