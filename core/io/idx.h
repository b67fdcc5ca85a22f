// IDX files (the MNIST / Fashion-MNIST container) read into fjit::Arrays.
//
// Promises: every reader accepts gzip-compressed and plain files alike (zlib reads a plain
// file through unchanged), checks the header against the data it actually holds, and on a
// missing, truncated, malformed or corrupt file throws std::runtime_error whose message
// starts with the path and says what was expected and what was found. Nothing is returned
// half-filled.
//
// Format (big-endian): bytes 0-1 zero, byte 2 element type (only 0x08, unsigned byte, is
// supported: it is all MNIST-like data sets use), byte 3 number of dimensions, then one
// u32 extent per dimension, then the elements row-major. Images are magic 0x00000803
// ([N, rows, cols]); labels are 0x00000801 ([N]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/io/data.h"

namespace fjit::io {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;
// Where Debian's package dataset-fashion-mnist installs the data set.
inline constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The raw content of an IDX file. The elements stay bytes here because fjit::Array has no
// u8 dtype (its bool dtype promises 0/1), so each caller converts to the dtype it needs.
struct IdxFile {
  uint32_t magic = 0;
  std::vector<int64_t> dims;   // extents from the header
  std::vector<uint8_t> bytes;  // exactly product(dims) elements
};

// Reads and validates a whole IDX file. Requires the magic number to be `expected_magic`
// (which fixes the element type and the number of dimensions).
IdxFile read_idx(const std::string& path, uint32_t expected_magic);

// f32 [N, rows*cols], each pixel scaled to [0, 1] (byte / 255); with pixels_dtype u8, the
// file's bytes as they are (a quarter of the memory; a step casts and scales them).
Array load_images(const std::string& path, DType pixels_dtype = DType::f32);
// i32 [N], the label bytes as they are.
Array load_labels(const std::string& path);

// Loads a pair of files and checks they hold the same number of examples. The data set's
// columns are "images" (as load_images makes them) and "labels" (i32 [N]).
Dataset load_dataset(const std::string& images_path, const std::string& labels_path,
                     DType pixels_dtype = DType::f32);

// Loads `<dir>/<split>-images-idx3-ubyte.gz` and `<dir>/<split>-labels-idx1-ubyte.gz`
// (falling back to the names without .gz when only unpacked files exist). `split` is
// "train" (60000 examples) or "t10k" (10000). Also checks every label is a class in [0, 9].
Dataset load_fashion_mnist(const std::string& dir, const std::string& split,
                           DType pixels_dtype = DType::f32);

}  // namespace fjit::io
