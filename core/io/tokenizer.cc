#include "core/io/tokenizer.h"

#include <fmt/format.h>

#include <stdexcept>

namespace fjit::io {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocab)
      throw std::invalid_argument(
          fmt::format("ByteTokenizer::decode: id {} at position {} of {} is outside [0, {})",
                      ids[i], i, ids.size(), kVocab));
    out[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return out;
}

}  // namespace fjit::io
