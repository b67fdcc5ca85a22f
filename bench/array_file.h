// Named arrays in a plain file that a program without fjit can read: bench/model_step and
// bench/lm_step write their initial parameters and their batch (--check FILE), and
// bench/libtorch_step loads them, so the two steps start from the same numbers.
//
// Layout: per array one text line "<name> <dtype> <rank> <dim>...\n" (dtype f32, u8 or i32)
// followed by the array's raw little-endian bytes, row-major; the file ends after the last one.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "parallel/fjit.h"

namespace fjit::bench {

inline void write_array_file(const std::string& path,
                             const std::vector<std::pair<std::string, Array>>& arrays) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error(fmt::format("write_array_file: cannot open {} for writing", path));
  bool ok = true;
  for (const auto& [name, a] : arrays) {
    if (a.dtype() != DType::f32 && a.dtype() != DType::u8 && a.dtype() != DType::i32)
      throw std::invalid_argument(fmt::format("write_array_file: {} is {}; only f32, u8 and i32 are written",
                                              name, dtype_name(a.dtype())));
    std::string head = fmt::format("{} {} {}", name, dtype_name(a.dtype()), a.rank());
    for (int64_t d : a.shape()) head += fmt::format(" {}", d);
    head += '\n';
    ok = ok && std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
         std::fwrite(a.raw(), 1, a.nbytes(), f) == a.nbytes();
  }
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error(fmt::format("write_array_file: writing {} failed", path));
}

}  // namespace fjit::bench
