// CRC-32C (Castagnoli), the checksum of TFRecord framing (TensorBoard event files), and its
// "masked" form. zlib's crc32 is a different polynomial, hence this one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fjit::io {

// CRC-32C of n bytes (reflected polynomial 0x82F63B78, initial value and final xor all ones):
// crc32c("123456789") == 0xE3069283. `crc` continues an earlier result: crc32c(ab) ==
// crc32c(b, crc32c(a)).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// TFRecord's mask, so that a CRC stored next to the data it covers is not itself a likely
// CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);

}  // namespace fjit::io
