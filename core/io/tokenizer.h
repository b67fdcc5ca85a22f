// ByteTokenizer: text as a sequence of byte tokens, for training byte-level language models.
//
//   io::ByteTokenizer tok;
//   std::vector<int32_t> ids = tok.encode("héllo");   // 6 ids: 'h', 0xC3, 0xA9, 'l', 'l', 'o'
//   std::string s = tok.decode(ids);                   // "héllo" again
//
// Promises:
//  - A token is the value of one byte, 0..255, so the vocabulary is exactly 256 and every
//    byte string has one encoding: decode(encode(s)) == s for any bytes, text or not (a
//    multi-byte UTF-8 character is several tokens).
//  - decode() accepts only ids in [0, kVocab); any other throws std::invalid_argument naming
//    the first offending id and its position in the sequence.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fjit::io {

class ByteTokenizer {
 public:
  static constexpr int32_t kVocab = 256;

  // One id per byte of `text`, the byte read as unsigned (0..255).
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes the ids stand for. Throws std::invalid_argument naming the position of the first
  // id outside [0, kVocab).
  std::string decode(const std::vector<int32_t>& ids) const;
};

}  // namespace fjit::io
