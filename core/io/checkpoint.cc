#include "core/io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"

namespace fjit::io {
namespace {

// ordered_json keeps the header's order, which load_checkpoint gives back.
using Json = nlohmann::ordered_json;

// Arrays are written and read as raw memory; safetensors data is little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoint I/O assumes a little-endian host");

// The reference implementation refuses larger headers too; a header this big means the
// length field is garbage, and refusing it keeps a corrupt file from costing gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::boolean: return "BOOL";
    case DType::u8: return "U8";
    case DType::u32: return "U32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
  }
  return "?";
}

bool dtype_from_safetensors(const std::string& s, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == safetensors_dtype(static_cast<DType>(i))) {
      *out = static_cast<DType>(i);
      return true;
    }
  return false;
}

std::string hex8(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

uint32_t crc_of(uint32_t crc, const void* p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(p), static_cast<z_size_t>(n)));
}

constexpr const char* kZeroDigits = "00000000";

// Where the checksum's 8 digits begin in a header, or npos when the key is not there exactly
// once, spelled plainly (the JSON parser would accept escapes that this search does not see,
// and such a header is refused). Inside a JSON string a quote is escaped, so the pattern
// below can only be the key itself followed by its string value.
size_t checksum_digits_at(const std::string& header) {
  const std::string key = std::string("\"") + kChecksumKey + "\":\"";
  const size_t at = header.find(key);
  if (at == std::string::npos || header.find(key, at + 1) != std::string::npos ||
      at + key.size() + 9 > header.size() || header[at + key.size() + 8] != '"')
    return std::string::npos;
  return at + key.size();
}

// Closes a file descriptor on every path out of load_checkpoint.
struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

// Reads exactly n bytes at `offset` or explains what it found instead.
void pread_all(const std::string& path, int fd, void* dst, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(path, std::string("read error: ") + std::strerror(errno));
    if (r == 0) fail(path, "file ended while reading (it shrank during the load?)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  size_t header_index;
};

// Validates one header entry against the safetensors schema; `data_bytes` is the size of
// the data section, so offsets that point past the file are caught here.
TensorSpec parse_spec(const std::string& path, const std::string& name, const Json& v,
                      uint64_t data_bytes) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!v.is_object()) fail(path, where + "expected an object, found " + v.type_name());
  for (const auto& [key, _] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(path, where + "unexpected key \"" + key + "\" (expected dtype, shape, data_offsets)");
  auto member = [&](const char* key) { return v.contains(key) ? &v.at(key) : nullptr; };
  const Json* dtype = member("dtype");
  const Json* shape = member("shape");
  const Json* offsets = member("data_offsets");
  if (!dtype || !dtype->is_string()) fail(path, where + "needs \"dtype\" as a string");
  if (!shape || !shape->is_array()) fail(path, where + "needs \"shape\" as an array of extents");
  if (!offsets || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_integer() || !(*offsets)[1].is_number_integer())
    fail(path, where + "needs \"data_offsets\" as [begin, end]");

  TensorSpec t{name, DType::f32, {}, 0, 0, 0};
  const std::string dtype_name = dtype->get<std::string>();
  if (!dtype_from_safetensors(dtype_name, &t.dtype))
    fail(path, where + "dtype \"" + dtype_name +
                   "\" is not supported (fjit reads F32, F64, I32, BOOL, U8, U32, F16, BF16)");
  // Capping the byte count at 2^62 keeps it (and Array's int64 element count) from
  // overflowing on a hostile shape; any zero extent makes the tensor empty regardless.
  uint64_t nbytes = static_cast<uint64_t>(dtype_size(t.dtype));
  bool empty = false;
  for (const Json& d : *shape) {
    // Extents beyond int64 parse as unsigned; Array's extents are int64.
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > INT64_MAX) ||
        d.get<int64_t>() < 0)
      fail(path, where + "shape must hold non-negative integers");
    t.shape.push_back(d.get<int64_t>());
    uint64_t e = static_cast<uint64_t>(t.shape.back());
    if (e == 0) {
      empty = true;
      continue;
    }
    if (nbytes > (uint64_t{1} << 62) / e)
      fail(path, where + "shape " + shape_str(t.shape) + "... has too many elements");
    nbytes *= e;
  }
  if (empty) nbytes = 0;
  auto offset = [&](const Json& o) -> int64_t {
    if (o.is_number_unsigned() && o.get<uint64_t>() > INT64_MAX) return -1;
    return o.get<int64_t>();
  };
  int64_t b = offset((*offsets)[0]), e = offset((*offsets)[1]);
  const std::string range = "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
  if (b < 0 || e < b) fail(path, where + "data_offsets " + range + " is not a valid range");
  t.begin = static_cast<uint64_t>(b);
  t.end = static_cast<uint64_t>(e);
  if (t.end > data_bytes)
    fail(path, where + "data_offsets " + range + " run past the end of the data (" +
                   std::to_string(data_bytes) + " bytes after the header)");
  if (t.end - t.begin != nbytes)
    fail(path, where + type_str(t.dtype, t.shape) + " needs " +
                   std::to_string(nbytes) +
                   " bytes but data_offsets " + range + " span " +
                   std::to_string(t.end - t.begin));
  return t;
}

}  // namespace

const Array* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, a] : tensors)
    if (n == name) return &a;
  return nullptr;
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  std::set<std::string> seen;
  for (const auto& [name, a] : ckpt.tensors) {
    if (name.empty() || name == "__metadata__")
      throw std::invalid_argument(path + ": cannot save a tensor named \"" + name + "\"");
    if (!seen.insert(name).second)
      throw std::invalid_argument(path + ": tensor name \"" + name + "\" appears twice");
    if (!a.defined())
      throw std::invalid_argument(path + ": tensor \"" + name + "\" is an undefined Array");
  }
  // Data goes widest element first (stable, so ties keep the caller's order): with the
  // header padded to 8 bytes, every tensor then starts at a multiple of its element size,
  // which readers that memory-map the file rely on. The reference writer does the same.
  const auto& t = ckpt.tensors;
  std::vector<size_t> layout(t.size());
  for (size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return dtype_size(t[a].second.dtype()) > dtype_size(t[b].second.dtype());
  });
  std::vector<uint64_t> begin(t.size());
  uint64_t offset = 0;
  for (size_t i : layout) {
    begin[i] = offset;
    offset += t[i].second.nbytes();
  }

  Json root = Json::object();
  Json& meta = root["__metadata__"] = Json::object();
  for (const auto& [k, v] : ckpt.metadata)
    if (k != kChecksumKey && k != kLegacyChecksumKey) meta[k] = v;
  meta[kChecksumKey] = kZeroDigits;  // placeholder: the checksum is of the file with it
  // Header members keep the caller's order, which load_checkpoint gives back.
  for (size_t i = 0; i < t.size(); ++i) {
    const auto& [name, a] = t[i];
    root[name] = Json{{"dtype", safetensors_dtype(a.dtype())},
                      {"shape", a.shape()},
                      {"data_offsets", {begin[i], begin[i] + a.nbytes()}}};
  }
  std::string header = root.dump();
  // Spaces are JSON whitespace; padding to 8 keeps every f64 tensor 8-byte aligned in a
  // memory-mapped file, as the reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  const size_t digits = checksum_digits_at(header);
  uint32_t crc = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
  crc = crc_of(crc, len, sizeof len);
  crc = crc_of(crc, header.data(), header.size());
  for (size_t i : layout) crc = crc_of(crc, t[i].second.raw(), t[i].second.nbytes());
  header.replace(digits, 8, hex8(crc));
  AtomicFile out(path);
  out.write(len, sizeof len);
  out.write(header.data(), header.size());
  for (size_t i : layout) out.write(t[i].second.raw(), t[i].second.nbytes());
  out.commit();
}

void require_checksum(const Checkpoint& ckpt, const std::string& what) {
  const std::string where = ckpt.path.empty() ? std::string("checkpoint") : ckpt.path;
  if (ckpt.integrity == Integrity::kDataOnly)
    throw std::runtime_error(where + ": written by fjit up to commit 4284e34 (metadata " +
                             kLegacyChecksumKey + ", a checksum of the tensor data only): its "
                             "header is not protected, " + what);
  if (ckpt.integrity == Integrity::kNone)
    throw std::runtime_error(where + ": has no " + kChecksumKey + " entry (removed, or not written "
                             "by fjit): nothing vouches for its header or data, " + what);
}

Checkpoint load_checkpoint(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail(path, std::string("cannot open checkpoint: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    fail(path, "truncated: file holds " + std::to_string(file_size) +
                   " bytes, too few for the 8-byte header length");
  unsigned char len[8];
  pread_all(path, f.fd, len, 8, 0);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t{len[i]} << (8 * i);
  if (header_len > file_size - 8)
    fail(path, "header length " + std::to_string(header_len) + " is larger than the rest of the file (" +
                   std::to_string(file_size - 8) + " bytes): truncated or not a safetensors file");
  if (header_len > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_len) + " exceeds the 100 MiB limit");
  std::string header(header_len, '\0');
  pread_all(path, f.fd, header.data(), header.size(), 8);
  if (header.empty() || header[0] != '{')
    fail(path, "malformed header: the JSON header must start with '{'");
  // The parser keeps the last of two equal names in an object; a callback sees each name
  // and the object it is in, so duplicates are refused instead of silently dropped.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto watch = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    else if (event == Json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    else if (event == Json::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
             !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json root;
  try {
    root = Json::parse(header, watch);
  } catch (const Json::exception& e) {
    fail(path, std::string("malformed header: ") + e.what());
  }
  if (!duplicate.empty()) fail(path, "header names \"" + duplicate + "\" twice");
  if (!root.is_object()) fail(path, "malformed header: expected a JSON object");

  const uint64_t data_bytes = file_size - 8 - header_len;
  Checkpoint out;
  out.path = path;
  std::vector<TensorSpec> specs;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(path, "__metadata__ must be an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail(path, "__metadata__ value for \"" + mk + "\" must be a string, found " +
                         mv.type_name());
        out.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    specs.push_back(parse_spec(path, key, value, data_bytes));
    specs.back().header_index = specs.size() - 1;
  }

  // The data section must be exactly the tensors laid end to end, as safetensors requires:
  // a gap or overlap means the header and data disagree, so neither can be trusted.
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return std::tie(a.begin, a.end, a.header_index) < std::tie(b.begin, b.end, b.header_index);
  });
  uint64_t expected = 0;
  for (const TensorSpec& t : specs) {
    if (t.begin < expected)
      fail(path, "tensor \"" + t.name + "\" overlaps the tensor before it (begins at byte " +
                     std::to_string(t.begin) + ", previous one ends at " + std::to_string(expected) + ")");
    if (t.begin > expected)
      fail(path, "gap of " + std::to_string(t.begin - expected) + " bytes before tensor \"" +
                     t.name + "\" (begins at byte " + std::to_string(t.begin) + ")");
    expected = t.end;
  }
  if (expected != data_bytes)
    fail(path, "the tensors cover " + std::to_string(expected) + " bytes but the file holds " +
                   std::to_string(data_bytes) + " bytes of data after the header");

  // The checksum covers the length field and the header with its own digits zeroed, then the
  // data in file order; tensors come back in header order.
  const bool whole = out.metadata.count(kChecksumKey) > 0;
  size_t digits = std::string::npos;
  if (whole) {
    digits = checksum_digits_at(header);
    if (digits == std::string::npos || header.compare(digits, 8, out.metadata.at(kChecksumKey)) != 0)
      fail(path, std::string("the header's ") + kChecksumKey +
                     " entry is not spelled as fjit writes it (edited by hand?)");
  }
  std::string zeroed = header;
  if (whole) zeroed.replace(digits, 8, kZeroDigits);
  uint32_t crc = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
  if (whole) {
    crc = crc_of(crc, len, sizeof len);
    crc = crc_of(crc, zeroed.data(), zeroed.size());
  }
  std::vector<Array> arrays(specs.size());
  for (const TensorSpec& t : specs) {
    Array& a = arrays[t.header_index];
    a = Array(t.dtype, t.shape);
    pread_all(path, f.fd, a.raw(), a.nbytes(), 8 + header_len + t.begin);
    crc = crc_of(crc, a.raw(), a.nbytes());
    if (t.dtype == DType::boolean) {
      const auto* b = static_cast<const uint8_t*>(a.raw());
      for (int64_t i = 0; i < a.size(); ++i)
        if (b[i] > 1)
          fail(path, "tensor \"" + t.name + "\": BOOL element " + std::to_string(i) +
                         " holds " + std::to_string(b[i]) + ", expected 0 or 1");
    }
  }
  if (whole) {
    if (out.metadata.at(kChecksumKey) != hex8(crc))
      fail(path, std::string("checksum mismatch: metadata ") + kChecksumKey + " is " +
                     out.metadata.at(kChecksumKey) + " but the file hashes to " + hex8(crc) +
                     " (its header or data changed after it was written)");
    out.integrity = Integrity::kWholeFile;
  } else if (auto it = out.metadata.find(kLegacyChecksumKey); it != out.metadata.end()) {
    if (it->second != hex8(crc))
      fail(path, std::string("checksum mismatch: metadata ") + kLegacyChecksumKey + " is " +
                     it->second + " but the tensor data hashes to " + hex8(crc) +
                     " (the data is corrupt)");
    out.integrity = Integrity::kDataOnly;
  }
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return a.header_index < b.header_index;
  });
  for (const TensorSpec& t : specs) out.tensors.emplace_back(t.name, std::move(arrays[t.header_index]));
  return out;
}

}  // namespace fjit::io
