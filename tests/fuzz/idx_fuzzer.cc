// Fuzzes the IDX reader (core/io/idx.h) with whole files, plain or gzip-compressed, as the
// data directory of a training run could hold them: read_idx for both magic numbers, then
// load_images (f32 and u8) and load_labels, which shape the bytes into Arrays.
//
// Checked for every input: no crash, leak or undefined behaviour; an error names the file;
// a file that reads holds exactly the elements its header promises, and for a plain
// (uncompressed) file the extents and bytes are the input's own, decoded here independently;
// the images and labels have the shapes and values those bytes make.
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "core/io/idx.h"
#include "tests/fuzz/fuzz_input.h"

using namespace fjit;

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// What read_idx returned, against the input decoded without it.
void check_file(const io::IdxFile& f, const uint8_t* data, size_t size) {
  uint64_t count = 1;
  for (int64_t d : f.dims) count *= static_cast<uint64_t>(d);
  if (f.bytes.size() != count) fuzz::fail("read_idx returned fewer or more bytes than its dims");
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (gzip) return;
  const size_t header = 4 + 4 * f.dims.size();
  if (size != header + count || be32(data) != f.magic) fuzz::fail("read_idx misread the header");
  for (size_t d = 0; d < f.dims.size(); ++d)
    if (static_cast<int64_t>(be32(data + 4 + 4 * d)) != f.dims[d]) fuzz::fail("read_idx misread an extent");
  if (count > 0 && std::memcmp(f.bytes.data(), data + header, count) != 0)
    fuzz::fail("read_idx changed the element bytes");
}

void check_images(const io::IdxFile& f, const std::string& path) {
  const Array u8 = io::load_images(path, DType::u8), f32 = io::load_images(path, DType::f32);
  const Shape want{f.dims[0], f.dims[1] * f.dims[2]};
  if (u8.shape() != want || f32.shape() != want) fuzz::fail("images have the wrong shape");
  const auto* bytes = static_cast<const uint8_t*>(u8.raw());
  const float* values = f32.data<float>();
  for (size_t i = 0; i < f.bytes.size(); ++i)
    if (bytes[i] != f.bytes[i] || values[i] != static_cast<float>(f.bytes[i]) / 255.0f)
      fuzz::fail("an image pixel differs from its byte");
}

void check_labels(const io::IdxFile& f, const std::string& path) {
  const Array labels = io::load_labels(path);
  if (labels.shape() != Shape{f.dims[0]}) fuzz::fail("labels have the wrong shape");
  for (size_t i = 0; i < f.bytes.size(); ++i)
    if (labels.data<int32_t>()[i] != f.bytes[i]) fuzz::fail("a label differs from its byte");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "input-idx-ubyte");
  for (uint32_t magic : {io::kIdxImagesMagic, io::kIdxLabelsMagic}) {
    try {
      const io::IdxFile f = io::read_idx(path, magic);
      check_file(f, data, size);
      if (magic == io::kIdxImagesMagic) check_images(f, path);
      else check_labels(f, path);
    } catch (const std::runtime_error& e) {
      fuzz::expect_names_file(e, path);
    }
  }
  return 0;
}
