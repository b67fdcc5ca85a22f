// The committed Fashion-MNIST fixture (tests/data: the first 16 test images and labels), as
// the tests that train or read IDX files load it. FJIT_TEST_DATA names another folder (CTest
// sets it); otherwise the source tree's tests/data, which the test targets are told
// (FJIT_SOURCE_DIR, tests/CMakeLists.txt).
#pragma once

#include <cstdlib>
#include <string>

#include "core/io/data.h"
#include "core/io/idx.h"

namespace fjit::testing {

inline std::string fixture_dir() {
  if (const char* d = std::getenv("FJIT_TEST_DATA")) return d;
#ifdef FJIT_SOURCE_DIR
  return std::string(FJIT_SOURCE_DIR) + "/tests/data";
#else
  return "tests/data";
#endif
}
inline std::string fixture_images() { return fixture_dir() + "/fmnist-16-images-idx3-ubyte.gz"; }
inline std::string fixture_labels() { return fixture_dir() + "/fmnist-16-labels-idx1-ubyte.gz"; }

// The 16 examples, loaded once per test program.
inline const io::Dataset& fixture() {
  static const io::Dataset d = io::load_dataset(fixture_images(), fixture_labels());
  return d;
}

}  // namespace fjit::testing
