#include "core/base/name_pattern.h"

#include <fnmatch.h>

namespace fjit {

bool name_matches(const std::string& pattern, const std::string& name) {
  if (pattern.empty()) return false;
  if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  // A '/'-aligned tail: the text after any '/' of the name.
  for (size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
    if (fnmatch(pattern.c_str(), name.c_str() + slash + 1, 0) == 0) return true;
  return false;
}

bool name_matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns)
    if (name_matches(p, name)) return true;
  return false;
}

}  // namespace fjit
