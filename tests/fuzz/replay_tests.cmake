# Included by tests/CMakeLists.txt: each fuzz harness (tests/fuzz/*_fuzzer.cc) linked with a
# plain main (replay_main.cc) instead of libFuzzer, and a CTest that runs it over the
# harness's committed corpus, so every build replays the seeds and the inputs of fixed
# findings with the harness's checks (and the sanitized builds do so under the sanitizer).
set(FJIT_FUZZ_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz)
foreach(name safetensors checkpoint_json idx command_line)
  set(target ${name}_fuzz_replay)
  add_executable(${target} ${FJIT_FUZZ_DIR}/${name}_fuzzer.cc ${FJIT_FUZZ_DIR}/fuzz_input.cc
                 ${FJIT_FUZZ_DIR}/replay_main.cc)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE ${FJIT_TEST_COMPILE_OPTIONS})
  target_link_libraries(${target} PRIVATE fjit)  # the command line's parser is in fjit_train
  add_test(NAME ${target} COMMAND ${target} ${FJIT_FUZZ_DIR}/corpus/${name})
  set_tests_properties(${target} PROPERTIES TIMEOUT 120)
endforeach()
