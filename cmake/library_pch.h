// The headers that most of fjit's library sources include, compiled once per library target
// into a precompiled header (cmake/FjitPch.cmake): the standard library's common parts, fmt,
// logging and the graph IR. Each source still includes what it uses; a build configured with
// -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON compiles every file on its own includes.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/log.h"
#include "core/ir/graph.h"
