# fjit_precompile_headers(TARGET): the library target's sources start from a precompiled
# cmake/library_pch.h, made once for the target. Most of a library source's compile time is
# spent in the headers it includes, the same ones in most files. A source compiled with options,
# definitions or include folders of its own (a micro-kernel left uninstrumented, the blocked
# update's -ffp-contract=off, the CPU check's -march=x86-64) compiles without it: a precompiled
# header is only valid under the flags it was made with.
function(fjit_precompile_headers target)
  target_precompile_headers(${target} PRIVATE ${PROJECT_SOURCE_DIR}/cmake/library_pch.h)
  get_target_property(sources ${target} SOURCES)
  foreach(src IN LISTS sources)
    foreach(prop COMPILE_OPTIONS COMPILE_DEFINITIONS INCLUDE_DIRECTORIES COMPILE_FLAGS)
      get_source_file_property(value ${src} ${prop})
      if(value)
        set_source_files_properties(${src} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endforeach()
  endforeach()
endfunction()
