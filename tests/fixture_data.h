// The committed Fashion-MNIST fixture (tests/data: the first 16 test images and labels), as
// the tests that train or read IDX files load it. FJIT_TEST_DATA names another folder (CTest
// sets it); otherwise the source tree's tests/data, which the test targets are told
// (FJIT_SOURCE_DIR, tests/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "core/io/data.h"
#include "core/io/idx.h"

namespace fjit::testing {

inline std::string fixture_dir() {
  if (const char* d = std::getenv("FJIT_TEST_DATA")) return d;
#ifdef FJIT_SOURCE_DIR
  return FJIT_SOURCE_DIR "/tests/data";
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

// A synthetic image set (uniform pixels, uniform labels) of `n` 784-pixel images, the same for
// the same seed on every rank; large enough at a few hundred images that every product of the
// models is split over threads.
inline io::Dataset synthetic_images(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0, 1);
  std::uniform_int_distribution<int32_t> label(0, 9);
  Array images(DType::f32, {n, 784}), labels(DType::i32, {n});
  for (int64_t i = 0; i < images.size(); ++i) images.data<float>()[i] = pixel(rng);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = label(rng);
  ArrayDict columns;
  columns.set("images", images);
  columns.set("labels", labels);
  return io::Dataset(columns);
}

}  // namespace fjit::testing
