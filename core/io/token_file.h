// Token files: a corpus tokenized once, then memory-mapped by every process that trains on it.
//
//   int64_t n = io::write_token_file("corpus.tok", io::corpus_files("/usr/share/games/fortunes"));
//   io::TokenFile tokens = io::TokenFile::open("corpus.tok");   // mapped, nothing read yet
//   io::TokenBatches batches(tokens, io::Split::kTrain, {...}, begin, end);   // token_batches.h
//
// Text. A file is text when it is valid UTF-8 (RFC 3629: shortest forms only, no surrogates
// U+D800..U+DFFF, nothing above U+10FFFF) and holds no control byte other than the seven of
// C's escapes \a \b \t \n \v \f \r (0x07..0x0D): NUL, the other C0 controls 0x01..0x06 and
// 0x0E..0x1F, and DEL 0x7F are not text. The fortune files of Debian's `fortunes` package
// are text under this rule (they contain tabs, backspace overstriking and a few bells).
//
// Format (every integer little-endian), version 1:
//   bytes  0..7   magic "FJITTOK\n"
//   bytes  8..11  u32 version (1)
//   bytes 12..15  u32 token width in bytes: 1, 2 or 4 (the least that holds vocab - 1)
//   bytes 16..19  i32 vocab: every token is in [0, vocab)
//   bytes 20..23  zero
//   bytes 24..31  i64 count of tokens
//   bytes 32..35  u32 CRC-32C of the token bytes (checked by verify(), not by open())
//   bytes 36..59  zero
//   bytes 60..63  u32 CRC-32C of bytes 0..59
//   bytes 64..    count tokens, each `width` bytes, unsigned
// so the file is exactly 64 + count * width bytes.
//
// Promises:
//  - Files are written through AtomicFile (atomic_file.h): the target is replaced whole or not
//    touched, never left half-written.
//  - open() validates the header (magic, version, width, vocab, header checksum) and the file
//    size against it, and throws std::runtime_error starting with the path and saying what
//    was found for a missing, truncated, foreign (another format), corrupt or newer file. It
//    reads nothing of the tokens: they are read from the mapping as they are used, and pages
//    the kernel can drop at will (the file is mapped read-only, shared). Replace a token file
//    by rename, as the writers here do: a mapping keeps the old content. A file truncated in
//    place while mapped makes reading the lost tokens fault (SIGBUS), as with any mapping.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fjit::io {

inline constexpr int64_t kTokenFileHeaderBytes = 64;

// Writes the byte tokens (tokenizer.h: ByteTokenizer) of `text_files`, concatenated in the
// given order with nothing between them, to `path` (vocab 256, width 1); returns the number of
// tokens (the sum of the files' sizes). Each file is read twice, in chunks (a pass to check it
// and count, a pass to copy), so memory stays small whatever the corpus size.
// Throws std::invalid_argument for an empty list; std::runtime_error starting with the
// offending file for a file that is missing, unreadable or not a regular file, an empty file,
// a byte that is not text (the message gives the byte and its offset in that file), a file
// that changed between the two passes, and for a failure to write `path`.
int64_t write_token_file(const std::string& path, const std::vector<std::string>& text_files);

// Writes `tokens` as a token file of vocabulary `vocab` (>= 1), with the least token width
// that holds it. Throws std::invalid_argument naming the position of a token outside
// [0, vocab) (nothing is written then), std::runtime_error if `path` cannot be written.
void write_token_file(const std::string& path, std::span<const int32_t> tokens, int32_t vocab);

// The text files a --corpus argument names, in the order write_token_file should read them.
// A directory gives its regular files (or links to regular files), sorted by name (byte
// order), not recursing, skipping hidden names (".*"), *.dat (fortune's index files) and
// *.u8 symbolic links (fortune's second name for a file already listed); any other path is
// returned as it is (write_token_file then reports it if it is missing). Throws
// std::runtime_error naming a directory that holds no such file or cannot be listed.
std::vector<std::string> corpus_files(const std::string& file_or_dir);

// True when `bytes` are text by the rule above; otherwise false with `offset` set to the
// offset of the first byte that is not (for a character cut short by the end, the offset of
// its first byte) and `why` saying what it is.
bool is_text(std::span<const uint8_t> bytes, int64_t* offset = nullptr, std::string* why = nullptr);

// A token file mapped read-only. Movable, not copyable; the mapping lives as long as the
// object (moved-from objects hold none).
class TokenFile {
 public:
  static TokenFile open(const std::string& path);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  int64_t size() const { return count_; }   // tokens
  int32_t vocab() const { return vocab_; }
  int width() const { return width_; }      // bytes per token
  const std::string& path() const { return path_; }

  // Token i. Throws std::out_of_range naming the path unless 0 <= i < size().
  int32_t at(int64_t i) const;
  // Tokens [begin, begin + n) into out[0..n): the cheap way to copy a window (one pass over
  // the mapped bytes, no per-token checks). Throws std::out_of_range naming the path unless
  // 0 <= begin and n >= 0 and begin + n <= size().
  void copy(int64_t begin, int64_t n, int32_t* out) const;
  // The token bytes as mapped (size() * width() bytes, little-endian when width > 1).
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(count_ * width_)}; }

  // Reads every token: checks the header's checksum of the token bytes and that every token
  // is below vocab(). Throws std::runtime_error naming the path (and the first bad token's
  // position) otherwise. Costs a read of the whole file; open() does not call it.
  void verify() const;

 private:
  TokenFile() = default;
  void release() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  int64_t count_ = 0;
  int32_t vocab_ = 0;
  int width_ = 1;
  uint32_t data_crc_ = 0;
};

}  // namespace fjit::io
