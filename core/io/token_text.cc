// Text files into a token file: what counts as text, the corpus of a directory, and the
// two-pass writer of token_file.h.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/io/crc32c.h"
#include "core/io/token_file.h"
#include "core/io/token_file_format.h"
#include "core/io/tokenizer.h"

namespace fjit::io {
namespace {

namespace fs = std::filesystem;

// Checks text (token_file.h's rule) fed in pieces, so that a file is checked chunk by chunk
// with a character allowed to straddle two chunks.
class TextChecker {
 public:
  // Checks the bytes at offsets [base, base + n); false at the first that is not text.
  bool feed(const uint8_t* p, size_t n, int64_t base) {
    for (size_t i = 0; i < n; ++i)
      if (!step(p[i], base + static_cast<int64_t>(i))) return false;
    return true;
  }
  // False when the input ended inside a character.
  bool finish() {
    if (need_ == 0) return true;
    return bad(lead_at_, "a UTF-8 character cut short by the end of the file");
  }
  int64_t bad_offset = -1;
  std::string why;

 private:
  bool bad(int64_t at, std::string what) {
    bad_offset = at;
    why = std::move(what);
    return false;
  }
  bool step(uint8_t b, int64_t at) {
    if (need_ > 0) {
      if (b < lo_ || b > hi_)
        return bad(at, fmt::format("byte 0x{:02X} is not valid UTF-8 (inside the character "
                                   "that starts at offset {})", b, lead_at_));
      --need_;
      lo_ = 0x80;
      hi_ = 0xBF;
      return true;
    }
    if (b < 0x80) {
      if (b == 0) return bad(at, "a NUL byte (0x00)");
      if (b < 0x07 || (b > 0x0D && b < 0x20) || b == 0x7F)
        return bad(at, fmt::format("control byte 0x{:02X}", b));
      return true;
    }
    // The lead byte fixes the length and the range of the first continuation byte, which is
    // where overlong forms, surrogates and code points above U+10FFFF are refused.
    if (b >= 0xC2 && b <= 0xDF) {
      need_ = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need_ = 2;
      if (b == 0xE0) lo_ = 0xA0;
      if (b == 0xED) hi_ = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need_ = 3;
      if (b == 0xF0) lo_ = 0x90;
      if (b == 0xF4) hi_ = 0x8F;
    } else {
      return bad(at, fmt::format("byte 0x{:02X} is not valid UTF-8 (it cannot start a character)", b));
    }
    lead_at_ = at;
    return true;
  }

  int need_ = 0;                   // continuation bytes still expected
  uint8_t lo_ = 0x80, hi_ = 0xBF;  // the range of the next one
  int64_t lead_at_ = 0;            // offset of the current character's first byte
};

struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

// Reads `file` in chunks, calling on_chunk(bytes, n, offset) for each; returns its size.
template <class F>
int64_t for_each_chunk(const std::string& file, F&& on_chunk) {
  Fd f{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw std::runtime_error(fmt::format("{}: cannot open: {}", file, std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw std::runtime_error(fmt::format("{}: cannot stat: {}", file, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(file + ": not a regular file");
  std::vector<uint8_t> buf(size_t{1} << 20);
  int64_t offset = 0;
  for (;;) {
    const ssize_t n = ::read(f.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw std::runtime_error(fmt::format("{}: cannot read at offset {}: {}", file, offset,
                                           std::strerror(errno)));
    if (n == 0) return offset;
    on_chunk(buf.data(), static_cast<size_t>(n), offset);
    offset += n;
  }
}

struct Checked {
  int64_t bytes;
  uint32_t crc;
};

// Pass one over a file: checks it is non-empty text; its size and checksum. `all_crc`
// continues over the file (the checksum of every file so far).
Checked check_text_file(const std::string& file, uint32_t& all_crc) {
  TextChecker text;
  uint32_t crc = 0;
  const int64_t size = for_each_chunk(file, [&](const uint8_t* p, size_t n, int64_t at) {
    if (!text.feed(p, n, at))
      throw std::runtime_error(fmt::format("{}: not text at byte offset {}: {}", file,
                                           text.bad_offset, text.why));
    crc = crc32c(p, n, crc);
    all_crc = crc32c(p, n, all_crc);
  });
  if (size == 0) throw std::runtime_error(file + ": empty file (a corpus file must hold text)");
  if (!text.finish())
    throw std::runtime_error(fmt::format("{}: not text at byte offset {}: {}", file,
                                         text.bad_offset, text.why));
  return {size, crc};
}

}  // namespace

bool is_text(std::span<const uint8_t> bytes, int64_t* offset, std::string* why) {
  TextChecker text;
  const bool ok = text.feed(bytes.data(), bytes.size(), 0) && text.finish();
  if (!ok) {
    if (offset != nullptr) *offset = text.bad_offset;
    if (why != nullptr) *why = text.why;
  }
  return ok;
}

int64_t write_token_file(const std::string& path, const std::vector<std::string>& text_files) {
  if (text_files.empty())
    throw std::invalid_argument("write_token_file " + path + ": no text files given");
  // Pass one: every file is checked before anything is written, and the header needs the
  // count and the checksum of all the tokens.
  std::vector<Checked> checked;
  int64_t count = 0;
  uint32_t all_crc = 0;
  for (const auto& file : text_files) {
    checked.push_back(check_text_file(file, all_crc));
    count += checked.back().bytes;
  }
  // Pass two: byte tokens are the files' bytes as they are.
  AtomicFile out(path);
  const std::string head = token_format::header(1, ByteTokenizer::kVocab, count, all_crc);
  out.write(head.data(), head.size());
  for (size_t i = 0; i < text_files.size(); ++i) {
    uint32_t crc = 0;
    const int64_t size = for_each_chunk(text_files[i], [&](const uint8_t* p, size_t n, int64_t) {
      crc = crc32c(p, n, crc);
      out.write(p, n);
    });
    if (size != checked[i].bytes || crc != checked[i].crc)
      throw std::runtime_error(fmt::format(
          "{}: the file changed while {} was written from it ({} bytes, then {})",
          text_files[i], path, checked[i].bytes, size));
  }
  out.commit();
  return count;
}

std::vector<std::string> corpus_files(const std::string& file_or_dir) {
  std::error_code ec;
  if (!fs::is_directory(file_or_dir, ec)) return {file_or_dir};
  std::vector<std::string> names;
  fs::directory_iterator it(file_or_dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot list: {}", file_or_dir, ec.message()));
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw std::runtime_error(fmt::format("{}: cannot list: {}", file_or_dir, ec.message()));
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || name.ends_with(".dat")) continue;
    if (name.ends_with(".u8") && it->is_symlink(ec)) continue;
    if (!it->is_regular_file(ec)) continue;  // follows links: a link to a file is that file
    names.push_back(name);
  }
  if (names.empty())
    throw std::runtime_error(file_or_dir + ": the directory holds no text files (hidden files, "
                             "*.dat and *.u8 links are skipped)");
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back((fs::path(file_or_dir) / n).string());
  return out;
}

}  // namespace fjit::io
