// Reading counts that users set by environment variable or command line: strictly, so that
// a typo is an error naming where the value came from, never a silent fallback. The
// environment itself is read only through core/base/config.h, whose count rows parse here.
#pragma once

#include <string>

namespace fjit {

// `text` as an integer in [1, max], written in decimal digits alone; anything else (empty,
// white space, a sign, trailing characters, out of range)
// throws std::invalid_argument "<what> must be an integer from 1 to <max>, got '<text>'".
int parse_count(const std::string& text, const std::string& what, int max);

}  // namespace fjit
