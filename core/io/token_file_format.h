// The header of a token file (token_file.h describes the format), shared by its writers and
// its reader. Internal to core/io.
#pragma once

#include <cstdint>
#include <string>

namespace fjit::io::token_format {

inline constexpr char kMagic[8] = {'F', 'J', 'I', 'T', 'T', 'O', 'K', '\n'};
inline constexpr uint32_t kVersion = 1;

// The least width in bytes (1, 2 or 4) whose unsigned tokens hold every id below `vocab`.
inline int width_for(int64_t vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }

// The 64 header bytes.
std::string header(int width, int32_t vocab, int64_t count, uint32_t data_crc);

}  // namespace fjit::io::token_format
