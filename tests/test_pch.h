// The headers most tests include, compiled once into a precompiled header that every test
// binary reuses (tests/CMakeLists.txt, fjit_test_pch). A test still includes what it uses: a
// build without precompiled headers (CMAKE_DISABLE_PRECOMPILE_HEADERS=ON) compiles each file
// on its own includes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "parallel/fjit.h"
#include "tests/test_util.h"
