#include "core/base/env.h"

#include <charconv>
#include <stdexcept>

namespace fjit {

int parse_count(const std::string& text, const std::string& what, int max) {
  // from_chars, unlike strtol, takes no leading white space or '+': the whole text is digits.
  long v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, v);
  if (text.empty() || error != std::errc() || stop != end || v < 1 || v > max)
    throw std::invalid_argument(what + " must be an integer from 1 to " + std::to_string(max) + ", got '" +
                                text + "'");
  return static_cast<int>(v);
}

}  // namespace fjit
