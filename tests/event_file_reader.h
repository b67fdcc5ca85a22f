// An independent reader of TensorBoard event files, for the tests of core/io/tensorboard.h:
// its own bit-at-a-time CRC-32C (not the library's table) and its own protobuf decoding.
// Throws std::runtime_error on any framing, checksum or encoding error.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace fjit::testing {

// CRC-32C one bit at a time, straight from the definition (reflected 0x82F63B78).
inline uint32_t bitwise_crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

inline uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// One Event as written by EventFileWriter: a version record or a single scalar.
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  bool has_value = false;
  std::string tag;
  float value = 0;
};

namespace detail {

struct Reader {
  const std::string& buf;
  size_t pos, end;
  bool done() const { return pos >= end; }
  uint8_t byte() {
    if (pos >= end) throw std::runtime_error("protobuf: truncated");
    return static_cast<uint8_t>(buf[pos++]);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = byte();
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("protobuf: varint too long");
  }
  uint64_t fixed(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return v;
  }
  // A length-delimited field's [begin, end).
  std::pair<size_t, size_t> span() {
    const uint64_t n = varint();
    if (n > end - pos) throw std::runtime_error("protobuf: length past the end");
    const size_t b = pos;
    pos += n;
    return {b, pos};
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 1) fixed(8);
    else if (wire == 2) span();
    else if (wire == 5) fixed(4);
    else throw std::runtime_error("protobuf: unknown wire type " + std::to_string(wire));
  }
};

inline void decode_value(const std::string& buf, size_t b, size_t e, DecodedEvent& ev) {
  Reader r{buf, b, e};
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 2) {
      auto [sb, se] = r.span();
      ev.tag = buf.substr(sb, se - sb);
    } else if (field == 2 && wire == 5) {
      const uint32_t bits = static_cast<uint32_t>(r.fixed(4));
      std::memcpy(&ev.value, &bits, sizeof bits);
      ev.has_value = true;
    } else {
      r.skip(wire);
    }
  }
}

inline DecodedEvent decode_event(const std::string& buf) {
  DecodedEvent ev;
  Reader r{buf, 0, buf.size()};
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) {
      const uint64_t bits = r.fixed(8);
      std::memcpy(&ev.wall_time, &bits, sizeof bits);
    } else if (field == 2 && wire == 0) {
      ev.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && wire == 2) {
      auto [b, e] = r.span();
      ev.file_version = buf.substr(b, e - b);
    } else if (field == 5 && wire == 2) {  // Summary: repeated Value (field 1)
      auto [b, e] = r.span();
      Reader s{buf, b, e};
      while (!s.done()) {
        const uint64_t k = s.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) {
          auto [vb, ve] = s.span();
          decode_value(buf, vb, ve, ev);
        } else {
          s.skip(static_cast<int>(k & 7));
        }
      }
    } else {
      r.skip(wire);
    }
  }
  return ev;
}

inline uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

}  // namespace detail

// Every event of the file at `path`, each record's two CRCs verified.
inline std::vector<DecodedEvent> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<DecodedEvent> events;
  size_t pos = 0;
  while (pos < file.size()) {
    if (file.size() - pos < 12) throw std::runtime_error(path + ": truncated record header");
    const uint64_t n = detail::le(file, pos, 8);
    if (detail::le(file, pos + 8, 4) != masked(bitwise_crc32c(file.data() + pos, 8)))
      throw std::runtime_error(path + ": bad length CRC at byte " + std::to_string(pos));
    if (file.size() - pos - 12 < n + 4) throw std::runtime_error(path + ": truncated record");
    const std::string data = file.substr(pos + 12, n);
    if (detail::le(file, pos + 12 + n, 4) != masked(bitwise_crc32c(data.data(), data.size())))
      throw std::runtime_error(path + ": bad data CRC at byte " + std::to_string(pos));
    events.push_back(detail::decode_event(data));
    pos += 12 + n + 4;
  }
  return events;
}

}  // namespace fjit::testing
