#include "core/io/idx.h"

#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace fjit::io {
namespace {

// Header extents multiply to the element count; a corrupt header could claim petabytes,
// so anything past this is rejected before a byte is allocated.
constexpr uint64_t kMaxElements = uint64_t{1} << 40;
constexpr unsigned kChunk = 1u << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// What a magic number means, so "found" in an error message tells the user what they have.
std::string describe_magic(uint32_t m) {
  if (m == kIdxImagesMagic) return "IDX images: unsigned bytes, 3 dimensions";
  if (m == kIdxLabelsMagic) return "IDX labels: unsigned bytes, 1 dimension";
  if ((m >> 16) != 0) return "not an IDX file: its first two bytes must be zero";
  char type[8];
  std::snprintf(type, sizeof type, "0x%02x", (m >> 8) & 0xff);
  return std::string("IDX with element type ") + type + ", " + std::to_string(m & 0xff) +
         " dimensions";
}

// "60000 images of 28x28", "60000 labels" or "[2,3,4] elements": what the header promises.
std::string describe_dims(uint32_t magic, const std::vector<int64_t>& dims) {
  if (magic == kIdxImagesMagic)
    return std::to_string(dims[0]) + " images of " + std::to_string(dims[1]) + "x" +
           std::to_string(dims[2]);
  if (magic == kIdxLabelsMagic) return std::to_string(dims[0]) + " labels";
  return shape_str(dims) + " elements";
}

// A gzFile that closes itself, and that turns zlib's error state into messages.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_)
      fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(f_, 1u << 17);
  }
  ~GzReader() { gzclose_r(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on a read or gzip error.
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    auto* out = static_cast<unsigned char*>(dst);
    while (got < n) {
      unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, kChunk));
      int r = gzread(f_, out + got, want);
      if (r < 0) fail(path_, error_text());
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

  // After a short read: "; <why the data ended>", or "" for a clean end of file.
  std::string end_reason() {
    int err = Z_OK;
    std::string msg = zlib_message(&err);
    if (err == Z_BUF_ERROR) return "; the gzip stream ends early (" + msg + ")";
    return "";
  }

 private:
  // zlib's message without the "<path>: " it prepends, which our messages already start with.
  std::string zlib_message(int* err) {
    std::string msg = gzerror(f_, err);
    if (msg.starts_with(path_ + ": ")) msg.erase(0, path_.size() + 2);
    return msg;
  }
  std::string error_text() {
    int err = Z_OK;
    std::string msg = zlib_message(&err);
    if (err == Z_ERRNO) return std::string("read error: ") + std::strerror(errno);
    return "gzip error: " + msg + " (the compressed data is corrupt)";
  }
  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

IdxFile read_idx(const std::string& path, uint32_t expected_magic) {
  GzReader in(path);
  IdxFile out;
  unsigned char head[4];
  size_t got = in.read(head, 4);
  if (got < 4)
    fail(path, "truncated: expected a 4-byte IDX magic number " + hex32(expected_magic) +
                   ", file holds " + std::to_string(got) + " bytes" + in.end_reason());
  out.magic = big_endian32(head);
  if (out.magic != expected_magic)
    fail(path, "bad magic: expected magic " + hex32(expected_magic) + " (" +
                   describe_magic(expected_magic) + "), found " + hex32(out.magic) + " (" +
                   describe_magic(out.magic) + ")");

  const size_t ndims = out.magic & 0xff;
  const size_t header_bytes = 4 + 4 * ndims;
  std::vector<unsigned char> dim_bytes(4 * ndims);
  got = in.read(dim_bytes.data(), dim_bytes.size());
  if (got < dim_bytes.size())
    fail(path, "truncated: header promises " + std::to_string(ndims) + " dimensions (" +
                   std::to_string(header_bytes) + "-byte header), file holds " +
                   std::to_string(4 + got) + " bytes" + in.end_reason());
  // The whole file's elements, and one item's (every extent but the first): an item size
  // must fit even when the item count is 0, or the shape built from it would overflow.
  uint64_t count = 1, item = 1;
  // Saturates just past the limit instead of letting the product wrap around.
  auto times = [](uint64_t a, uint32_t extent) {
    return extent != 0 && a > kMaxElements / extent ? kMaxElements + 1 : a * extent;
  };
  for (size_t d = 0; d < ndims; ++d) {
    uint32_t extent = big_endian32(&dim_bytes[4 * d]);
    out.dims.push_back(extent);
    count = times(count, extent);
    if (d > 0) item = times(item, extent);
  }
  if (count > kMaxElements || item > kMaxElements)
    fail(path, "malformed header: extents " + shape_str(out.dims) + " claim more than 2^40 bytes");

  // Grow as data arrives instead of trusting the header with one big allocation.
  out.bytes.reserve(std::min<uint64_t>(count, uint64_t{1} << 26));
  while (out.bytes.size() < count) {
    size_t old = out.bytes.size();
    size_t want = std::min<uint64_t>(count - old, 16 * kChunk);
    out.bytes.resize(old + want);
    size_t r = in.read(out.bytes.data() + old, want);
    out.bytes.resize(old + r);
    if (r < want) break;
  }
  const std::string promise = "header says " + describe_dims(out.magic, out.dims) + " (" +
                              std::to_string(count) + " bytes)";
  if (out.bytes.size() < count)
    fail(path, "truncated: " + promise + ", file holds " + std::to_string(out.bytes.size()) +
                   " bytes after the " + std::to_string(header_bytes) + "-byte header" +
                   in.end_reason());
  unsigned char extra;
  if (in.read(&extra, 1) != 0)
    fail(path, "malformed: " + promise + ", but the file holds more bytes after them");
  // A gzip stream cut exactly at the end of the data still lacks its CRC trailer.
  std::string reason = in.end_reason();
  if (!reason.empty()) fail(path, "truncated: " + promise + " are all there" + reason);
  return out;
}

Array load_images(const std::string& path, DType pixels_dtype) {
  IdxFile f = read_idx(path, kIdxImagesMagic);
  const int64_t n = f.dims[0], pixels = f.dims[1] * f.dims[2];
  if (pixels_dtype == DType::u8) {
    Array a(DType::u8, Shape{n, pixels});
    if (!f.bytes.empty()) std::memcpy(a.raw(), f.bytes.data(), f.bytes.size());
    return a;
  }
  if (pixels_dtype != DType::f32)
    throw std::invalid_argument(path + ": images load as f32 or u8, not " +
                                dtype_name(pixels_dtype));
  Array a(DType::f32, Shape{n, pixels});
  float* d = a.data<float>();
  // Dividing (not multiplying by 1/255) keeps byte -> float exact to invert: round(x*255).
  for (size_t i = 0; i < f.bytes.size(); ++i) d[i] = static_cast<float>(f.bytes[i]) / 255.0f;
  return a;
}

Array load_labels(const std::string& path) {
  IdxFile f = read_idx(path, kIdxLabelsMagic);
  Array a(DType::i32, Shape{f.dims[0]});
  int32_t* d = a.data<int32_t>();
  for (size_t i = 0; i < f.bytes.size(); ++i) d[i] = f.bytes[i];
  return a;
}

Dataset load_dataset(const std::string& images_path, const std::string& labels_path,
                     DType pixels_dtype) {
  Array images = load_images(images_path, pixels_dtype), labels = load_labels(labels_path);
  if (images.shape()[0] != labels.shape()[0])
    throw std::runtime_error(images_path + " holds " + std::to_string(images.shape()[0]) +
                             " images but " + labels_path + " holds " +
                             std::to_string(labels.shape()[0]) +
                             " labels: the counts must match");
  return Dataset({{"images", std::move(images)}, {"labels", std::move(labels)}});
}

Dataset load_fashion_mnist(const std::string& dir, const std::string& split, DType pixels_dtype) {
  if (split != "train" && split != "t10k")
    throw std::invalid_argument("load_fashion_mnist: split must be \"train\" or \"t10k\", got \"" +
                                split + "\"");
  namespace fs = std::filesystem;
  auto pick = [&](const std::string& stem) {
    std::string gz = (fs::path(dir) / (stem + ".gz")).string();
    std::string plain = (fs::path(dir) / stem).string();
    if (fs::exists(gz) || !fs::exists(plain)) return gz;
    return plain;  // only the unpacked file exists
  };
  // Neither name exists: say what belongs there and where it usually comes from, since the
  // usual cause is a data set that was never installed.
  for (const char* stem : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
    const std::string path = pick(split + stem);
    if (!fs::exists(path))
      throw std::runtime_error(path + ": cannot open: no such file (expected Fashion-MNIST's " +
                               split + (stem[1] == 'i' ? " images" : " labels") +
                               ", gzip or plain IDX; Debian's dataset-fashion-mnist package installs "
                               "them in " + kDebianFashionMnistDir + ")");
  }
  std::string labels_path = pick(split + "-labels-idx1-ubyte");
  Dataset ds = load_dataset(pick(split + "-images-idx3-ubyte"), labels_path, pixels_dtype);
  const Array& labels = ds["labels"];
  const int32_t* y = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.size(); ++i)
    if (y[i] < 0 || y[i] > 9)
      throw std::runtime_error(labels_path + ": label " + std::to_string(y[i]) + " at index " +
                               std::to_string(i) + " is not a Fashion-MNIST class (expected 0..9)");
  return ds;
}

}  // namespace fjit::io
