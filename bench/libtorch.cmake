# bench/libtorch_step (LibTorch's side of bench/jax_step.py's comparison), optional. Built only
# when FJIT_LIBTORCH_DIR, or the environment variable of that name at the first configure,
# names a LibTorch: the torch Python wheel's package folder
#   python -c "import torch, os; print(os.path.dirname(torch.__file__))"
# or an unpacked LibTorch archive (both hold include/, lib/ and share/cmake/Torch). Never part
# of `all`, so neither `make test` nor CI builds it: `make bench` builds the bench_optional
# target, which depends on it when it exists.
#
# Torch's own CMake config comes first. It may need a CUDA toolkit (a CUDA wheel's does) and
# then stops the configure with an error, which find_package cannot catch, or configure and
# fail to link: so it is tried once in a throw-away project (configured and linked, the result
# cached per folder), and where that fails the CPU libraries
# (libtorch.so, libtorch_cpu.so, libc10.so) are linked directly, with the wheel's C++ ABI.
set(FJIT_LIBTORCH_DIR "" CACHE PATH "A LibTorch (the torch wheel's package folder) for bench/libtorch_step; empty: skipped")
if(NOT FJIT_LIBTORCH_DIR AND DEFINED ENV{FJIT_LIBTORCH_DIR})
  set(FJIT_LIBTORCH_DIR "$ENV{FJIT_LIBTORCH_DIR}" CACHE PATH "" FORCE)
endif()
add_custom_target(bench_optional)
if(NOT FJIT_LIBTORCH_DIR)
  message(STATUS "bench/libtorch_step: skipped (no LibTorch; configure with -DFJIT_LIBTORCH_DIR=<torch package folder>)")
  return()
endif()
set(dir "${FJIT_LIBTORCH_DIR}")
if(NOT EXISTS "${dir}/include/torch/csrc/api/include/torch/torch.h")
  message(STATUS "bench/libtorch_step: skipped (${dir} holds no include/torch/csrc/api/include/torch/torch.h)")
  return()
endif()

if(NOT FJIT_LIBTORCH_PROBED STREQUAL dir)
  # Configures, and links an empty program with TORCH_LIBRARIES (a CUDA wheel's libraries may
  # configure and then miss symbols of libraries found elsewhere).
  set(probe "${CMAKE_BINARY_DIR}/libtorch_probe")
  file(WRITE "${probe}/main.cc" "int main() { return 0; }\n")
  file(WRITE "${probe}/CMakeLists.txt"
       "cmake_minimum_required(VERSION 3.20)\nproject(probe CXX)\n"
       "find_package(Torch CONFIG REQUIRED PATHS \"${dir}/share/cmake\" NO_DEFAULT_PATH)\n"
       "add_executable(probe main.cc)\ntarget_link_libraries(probe \${TORCH_LIBRARIES})\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${probe}" -B "${probe}/build" -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    execute_process(COMMAND ${CMAKE_COMMAND} --build "${probe}/build" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  endif()
  set(ok OFF)
  if(rc EQUAL 0)
    set(ok ON)
  endif()
  set(FJIT_LIBTORCH_CONFIG_WORKS ${ok} CACHE INTERNAL "find_package(Torch) configures and links for FJIT_LIBTORCH_DIR")
  set(FJIT_LIBTORCH_PROBED "${dir}" CACHE INTERNAL "the LibTorch folder FJIT_LIBTORCH_CONFIG_WORKS is about")
endif()

set(how "")
if(FJIT_LIBTORCH_CONFIG_WORKS)
  find_package(Torch CONFIG QUIET PATHS "${dir}/share/cmake" NO_DEFAULT_PATH)
endif()
if(Torch_FOUND)
  set(libs ${TORCH_LIBRARIES})
  set(how "Torch's CMake config")
else()
  set(libs "")
  foreach(lib torch torch_cpu c10)
    find_library(FJIT_LIBTORCH_${lib} ${lib} PATHS "${dir}/lib" NO_DEFAULT_PATH)
    if(NOT FJIT_LIBTORCH_${lib})
      message(STATUS "bench/libtorch_step: skipped (no lib${lib}.so in ${dir}/lib)")
      return()
    endif()
    list(APPEND libs ${FJIT_LIBTORCH_${lib}})
  endforeach()
  # The C++ ABI the library was built with: its config says so where it is not the default
  # (torch.compiled_with_cxx11_abi() in Python).
  set(abi 1)
  if(EXISTS "${dir}/share/cmake/Torch/TorchConfig.cmake")
    file(STRINGS "${dir}/share/cmake/Torch/TorchConfig.cmake" flags REGEX "_GLIBCXX_USE_CXX11_ABI=[01]")
    if(flags MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
      set(abi 0)
    endif()
  endif()
  set(how "its CPU libraries directly (Torch's CMake config failed to configure or link), C++11 ABI ${abi}")
endif()

add_executable(libtorch_step EXCLUDE_FROM_ALL libtorch_step.cc)
add_dependencies(bench_optional libtorch_step)
target_include_directories(libtorch_step PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_features(libtorch_step PRIVATE cxx_std_20)
target_link_libraries(libtorch_step PRIVATE ${libs} Threads::Threads)
if(NOT Torch_FOUND)
  # Its headers as system headers: their warnings are not the bench's.
  target_include_directories(libtorch_step SYSTEM PRIVATE "${dir}/include" "${dir}/include/torch/csrc/api/include")
  target_compile_definitions(libtorch_step PRIVATE _GLIBCXX_USE_CXX11_ABI=${abi})
endif()
# The binary finds its libraries without LD_LIBRARY_PATH.
set_target_properties(libtorch_step PROPERTIES BUILD_RPATH "${dir}/lib")
message(STATUS "bench/libtorch_step: LibTorch from ${dir}, linked through ${how} (make bench builds it)")
