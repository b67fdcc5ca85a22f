#include "core/io/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "core/io/atomic_file.h"
#include "core/io/crc32c.h"
#include "core/io/token_file_format.h"

namespace fjit::io {
namespace {

constexpr size_t kHeaderCrcAt = 60;

void put_le(std::string& s, size_t at, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) s[at + k] = static_cast<char>((v >> (8 * k)) & 0xff);
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int k = 0; k < bytes; ++k) v |= static_cast<uint64_t>(p[k]) << (8 * k);
  return v;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// An fd closed on every way out.
struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

}  // namespace

std::string token_format::header(int width, int32_t vocab, int64_t count, uint32_t data_crc) {
  std::string h(kTokenFileHeaderBytes, '\0');
  std::memcpy(h.data(), kMagic, sizeof kMagic);
  put_le(h, 8, kVersion, 4);
  put_le(h, 12, static_cast<uint32_t>(width), 4);
  put_le(h, 16, static_cast<uint32_t>(vocab), 4);
  put_le(h, 24, static_cast<uint64_t>(count), 8);
  put_le(h, 32, data_crc, 4);
  put_le(h, kHeaderCrcAt, crc32c(h.data(), kHeaderCrcAt), 4);
  return h;
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens, int32_t vocab) {
  if (vocab < 1)
    throw std::invalid_argument(fmt::format("write_token_file {}: vocab must be >= 1, got {}", path, vocab));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw std::invalid_argument(fmt::format(
          "write_token_file {}: token {} at position {} is outside [0, {})", path, tokens[i], i, vocab));
  const int width = token_format::width_for(vocab);
  std::string body(tokens.size() * static_cast<size_t>(width), '\0');
  for (size_t i = 0; i < tokens.size(); ++i)
    put_le(body, i * width, static_cast<uint32_t>(tokens[i]), width);
  AtomicFile out(path);
  const std::string head = token_format::header(width, vocab, static_cast<int64_t>(tokens.size()),
                                                crc32c(body.data(), body.size()));
  out.write(head.data(), head.size());
  out.write(body.data(), body.size());
  out.commit();
}

TokenFile TokenFile::open(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail(path, fmt::format("cannot open token file: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(path, fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const auto file_bytes = static_cast<int64_t>(st.st_size);

  uint8_t h[kTokenFileHeaderBytes] = {};
  const auto want = static_cast<size_t>(std::min<int64_t>(file_bytes, kTokenFileHeaderBytes));
  if (::pread(f.fd, h, want, 0) != static_cast<ssize_t>(want))
    fail(path, fmt::format("cannot read the header: {}", std::strerror(errno)));
  // Foreign before truncated: a short file whose bytes are not a start of the magic is some
  // other file, not a token file cut short.
  const size_t magic_have = std::min(want, sizeof token_format::kMagic);
  if (std::memcmp(h, token_format::kMagic, magic_have) != 0)
    fail(path, "not an fjit token file (its first bytes are not the magic \"FJITTOK\\n\")");
  if (file_bytes < kTokenFileHeaderBytes)
    fail(path, fmt::format("truncated token file: {} bytes, shorter than the {}-byte header",
                           file_bytes, kTokenFileHeaderBytes));
  if (static_cast<uint32_t>(get_le(h + kHeaderCrcAt, 4)) != crc32c(h, kHeaderCrcAt))
    fail(path, "corrupt token file: the header's checksum does not match its bytes");
  const auto version = static_cast<uint32_t>(get_le(h + 8, 4));
  if (version != token_format::kVersion)
    fail(path, fmt::format("token file version {}; this build reads version {}", version,
                           token_format::kVersion));

  TokenFile t;
  t.path_ = path;
  t.width_ = static_cast<int>(get_le(h + 12, 4));
  t.vocab_ = static_cast<int32_t>(get_le(h + 16, 4));
  t.count_ = static_cast<int64_t>(get_le(h + 24, 8));
  t.data_crc_ = static_cast<uint32_t>(get_le(h + 32, 4));
  if (t.width_ != 1 && t.width_ != 2 && t.width_ != 4)
    fail(path, fmt::format("token width {} bytes; expected 1, 2 or 4", t.width_));
  if (t.vocab_ < 1 || token_format::width_for(t.vocab_) > t.width_)
    fail(path, fmt::format("vocab {} does not fit tokens of {} bytes", t.vocab_, t.width_));
  if (t.count_ < 0 || t.count_ > (INT64_MAX - kTokenFileHeaderBytes) / t.width_)
    fail(path, fmt::format("token count {} is impossible", t.count_));
  const int64_t expect = kTokenFileHeaderBytes + t.count_ * t.width_;
  if (file_bytes < expect)
    fail(path, fmt::format("truncated token file: the header promises {} tokens of {} bytes "
                           "({} bytes in all), the file has {} bytes",
                           t.count_, t.width_, expect, file_bytes));
  if (file_bytes > expect)
    fail(path, fmt::format("token file has {} bytes after the {} tokens its header promises",
                           file_bytes - expect, t.count_));

  t.map_bytes_ = static_cast<size_t>(file_bytes);
  void* m = ::mmap(nullptr, t.map_bytes_, PROT_READ, MAP_SHARED, f.fd, 0);
  if (m == MAP_FAILED) fail(path, fmt::format("cannot map: {}", std::strerror(errno)));
  t.map_ = m;
  t.data_ = static_cast<const uint8_t*>(m) + kTokenFileHeaderBytes;
  return t;
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    count_ = std::exchange(o.count_, 0);
    vocab_ = std::exchange(o.vocab_, 0);
    width_ = std::exchange(o.width_, 1);
    data_crc_ = std::exchange(o.data_crc_, 0);
  }
  return *this;
}

TokenFile::~TokenFile() { release(); }

void TokenFile::release() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
}

int32_t TokenFile::at(int64_t i) const {
  if (i < 0 || i >= count_)
    throw std::out_of_range(fmt::format("{}: token {} of a file of {} tokens", path_, i, count_));
  return static_cast<int32_t>(get_le(data_ + i * width_, width_));
}

void TokenFile::copy(int64_t begin, int64_t n, int32_t* out) const {
  if (begin < 0 || n < 0 || begin > count_ - n)
    throw std::out_of_range(fmt::format("{}: tokens [{}, {}) of a file of {} tokens", path_,
                                        begin, begin + n, count_));
  const uint8_t* p = data_ + begin * width_;
  switch (width_) {
    case 1:
      for (int64_t k = 0; k < n; ++k) out[k] = p[k];
      break;
    case 2:
      for (int64_t k = 0; k < n; ++k) out[k] = static_cast<int32_t>(get_le(p + 2 * k, 2));
      break;
    default:
      for (int64_t k = 0; k < n; ++k) out[k] = static_cast<int32_t>(get_le(p + 4 * k, 4));
  }
}

void TokenFile::verify() const {
  const auto b = bytes();
  if (crc32c(b.data(), b.size()) != data_crc_)
    fail(path_, "corrupt token file: the checksum of the tokens does not match the header's");
  for (int64_t i = 0; i < count_; ++i) {
    const auto v = get_le(data_ + i * width_, width_);
    if (v >= static_cast<uint64_t>(vocab_))
      fail(path_, fmt::format("token {} at position {} is outside the vocab [0, {})", v, i, vocab_));
  }
}

}  // namespace fjit::io
