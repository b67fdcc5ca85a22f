#include "core/runtime/env.h"

#include <cstdlib>
#include <stdexcept>

namespace fjit {

int parse_count(const std::string& text, const std::string& what, int max) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > max)
    throw std::invalid_argument(what + " must be an integer from 1 to " + std::to_string(max) + ", got '" +
                                text + "'");
  return static_cast<int>(v);
}

int env_count(const char* name, int fallback, int max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return parse_count(text, name, max);
}

}  // namespace fjit
