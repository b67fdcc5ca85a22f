# Fails unless the README's tour (the first ```cpp block after "## A 30-line tour") is exactly
# examples/tour.cc, so the tour a reader copies is the program CTest builds and runs.
# usage: cmake -DREADME=README.md -DTOUR=examples/tour.cc -P readme_tour_test.cmake
file(READ ${README} readme)
file(READ ${TOUR} tour)
string(FIND "${readme}" "## A 30-line tour" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README} has no '## A 30-line tour' section")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "```cpp\n" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "the tour section of ${README} has no ```cpp block")
endif()
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${readme}" ${begin} -1 readme)
string(FIND "${readme}" "```" end)
string(SUBSTRING "${readme}" 0 ${end} block)
if(NOT block STREQUAL tour)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/readme_tour_block.cc "${block}")
  message(FATAL_ERROR "the README's tour differs from ${TOUR}; the README's block is in "
                      "${CMAKE_CURRENT_BINARY_DIR}/readme_tour_block.cc (diff the two)")
endif()
message(STATUS "README tour == ${TOUR}")
