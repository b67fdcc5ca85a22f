#include "lib/checkpoint.h"

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

#include "lib/atomic_file.h"
#include "lib/json_lite.h"

namespace fjit::io {
namespace {

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
  }
  return "?";
}

bool dtype_from_safetensors(const std::string& s, DType* out) {
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::boolean})
    if (s == safetensors_dtype(t)) {
      *out = t;
      return true;
    }
  return false;
}

std::string hex8(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

uint32_t crc_of(uint32_t crc, const Array& a) {
  return static_cast<uint32_t>(
      crc32_z(crc, static_cast<const Bytef*>(a.raw()), static_cast<z_size_t>(a.nbytes())));
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
TensorSpec parse_spec(const std::string& path, const std::string& name, const json::Value& v,
                      uint64_t data_bytes) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!v.is(json::Value::Kind::object))
    fail(path, where + "expected an object, found " + json::kind_name(v.kind));
  for (const auto& [key, _] : v.members)
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(path, where + "unexpected key \"" + key + "\" (expected dtype, shape, data_offsets)");
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  if (!dtype || !dtype->is(json::Value::Kind::string))
    fail(path, where + "needs \"dtype\" as a string");
  if (!shape || !shape->is(json::Value::Kind::array))
    fail(path, where + "needs \"shape\" as an array of extents");
  if (!offsets || !offsets->is(json::Value::Kind::array) || offsets->items.size() != 2 ||
      !offsets->items[0].is(json::Value::Kind::integer) ||
      !offsets->items[1].is(json::Value::Kind::integer))
    fail(path, where + "needs \"data_offsets\" as [begin, end]");

  TensorSpec t{name, DType::f32, {}, 0, 0, 0};
  if (!dtype_from_safetensors(dtype->string, &t.dtype))
    fail(path, where + "dtype \"" + dtype->string +
                   "\" is not supported (fjit reads F32, F64, I32, BOOL)");
  // Capping the byte count at 2^62 keeps it (and Array's int64 element count) from
  // overflowing on a hostile shape; any zero extent makes the tensor empty regardless.
  uint64_t nbytes = static_cast<uint64_t>(dtype_size(t.dtype));
  bool empty = false;
  for (const json::Value& d : shape->items) {
    if (!d.is(json::Value::Kind::integer) || d.integer < 0)
      fail(path, where + "shape must hold non-negative integers");
    t.shape.push_back(d.integer);
    uint64_t e = static_cast<uint64_t>(d.integer);
    if (e == 0) {
      empty = true;
      continue;
    }
    if (nbytes > (uint64_t{1} << 62) / e)
      fail(path, where + "shape " + shape_str(t.shape) + "... has too many elements");
    nbytes *= e;
  }
  if (empty) nbytes = 0;
  int64_t b = offsets->items[0].integer, e = offsets->items[1].integer;
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
  uint32_t crc = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
  for (size_t i : layout) {
    begin[i] = offset;
    offset += t[i].second.nbytes();
    crc = crc_of(crc, t[i].second);
  }

  json::Value meta = json::Value::object();
  for (const auto& [k, v] : ckpt.metadata)
    if (k != kChecksumKey) meta.members.emplace_back(k, json::Value::of_string(v));
  meta.members.emplace_back(kChecksumKey, json::Value::of_string(hex8(crc)));
  json::Value root = json::Value::object();
  root.members.emplace_back("__metadata__", std::move(meta));
  // Header members keep the caller's order, which load_checkpoint gives back.
  for (size_t i = 0; i < t.size(); ++i) {
    const auto& [name, a] = t[i];
    json::Value spec = json::Value::object();
    spec.members.emplace_back("dtype", json::Value::of_string(safetensors_dtype(a.dtype())));
    json::Value shape = json::Value::array();
    for (int64_t d : a.shape()) shape.items.push_back(json::Value::of_int(d));
    spec.members.emplace_back("shape", std::move(shape));
    json::Value range = json::Value::array();
    range.items.push_back(json::Value::of_int(static_cast<int64_t>(begin[i])));
    range.items.push_back(json::Value::of_int(static_cast<int64_t>(begin[i] + a.nbytes())));
    spec.members.emplace_back("data_offsets", std::move(range));
    root.members.emplace_back(name, std::move(spec));
  }
  std::string header = json::dump(root);
  // Spaces are JSON whitespace; padding to 8 keeps every f64 tensor 8-byte aligned in a
  // memory-mapped file, as the reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  AtomicFile out(path);
  out.write(len, sizeof len);
  out.write(header.data(), header.size());
  for (size_t i : layout) out.write(t[i].second.raw(), t[i].second.nbytes());
  out.commit();
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
  json::Value root;
  try {
    root = json::parse(header);
  } catch (const json::ParseError& e) {
    fail(path, std::string("malformed header: ") + e.what());
  }
  if (!root.is(json::Value::Kind::object))
    fail(path, "malformed header: expected a JSON object");

  const uint64_t data_bytes = file_size - 8 - header_len;
  Checkpoint out;
  std::vector<TensorSpec> specs;
  std::set<std::string> seen;
  for (const auto& [key, value] : root.members) {
    if (!seen.insert(key).second) fail(path, "header names \"" + key + "\" twice");
    if (key == "__metadata__") {
      if (!value.is(json::Value::Kind::object))
        fail(path, "__metadata__ must be an object of strings");
      for (const auto& [mk, mv] : value.members) {
        if (!mv.is(json::Value::Kind::string))
          fail(path, "__metadata__ value for \"" + mk + "\" must be a string, found " +
                         json::kind_name(mv.kind));
        if (!out.metadata.emplace(mk, mv.string).second)
          fail(path, "__metadata__ names \"" + mk + "\" twice");
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

  // Read in file order (the checksum covers the bytes as they lie), return in header order.
  uint32_t crc = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
  std::vector<Array> arrays(specs.size());
  for (const TensorSpec& t : specs) {
    Array& a = arrays[t.header_index];
    a = Array(t.dtype, t.shape);
    pread_all(path, f.fd, a.raw(), a.nbytes(), 8 + header_len + t.begin);
    crc = crc_of(crc, a);
    if (t.dtype == DType::boolean) {
      const auto* b = static_cast<const uint8_t*>(a.raw());
      for (int64_t i = 0; i < a.size(); ++i)
        if (b[i] > 1)
          fail(path, "tensor \"" + t.name + "\": BOOL element " + std::to_string(i) +
                         " holds " + std::to_string(b[i]) + ", expected 0 or 1");
    }
  }
  auto it = out.metadata.find(kChecksumKey);
  if (it != out.metadata.end() && it->second != hex8(crc))
    fail(path, std::string("checksum mismatch: metadata ") + kChecksumKey + " is " + it->second +
                   " but the tensor data hashes to " + hex8(crc) + " (the data is corrupt)");
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return a.header_index < b.header_index;
  });
  for (const TensorSpec& t : specs) out.tensors.emplace_back(t.name, std::move(arrays[t.header_index]));
  return out;
}

void check_compatible(const Checkpoint& ckpt, const NamedArrays& expected) {
  for (const auto& [name, want] : expected) {
    const std::string want_type = type_str(want.dtype(), want.shape());
    const Array* have = ckpt.find(name);
    if (!have)
      throw std::runtime_error("incompatible checkpoint: it lacks " + name + ", model expects " +
                               want_type);
    if (have->dtype() != want.dtype() || have->shape() != want.shape())
      throw std::runtime_error("incompatible checkpoint: checkpoint has " + name + " " +
                               type_str(have->dtype(), have->shape()) + ", model expects " +
                               want_type);
  }
  for (const auto& [name, have] : ckpt.tensors) {
    bool known = std::any_of(expected.begin(), expected.end(),
                             [&](const auto& e) { return e.first == name; });
    if (!known)
      throw std::runtime_error("incompatible checkpoint: checkpoint has " + name + " " +
                               type_str(have.dtype(), have.shape()) +
                               ", which the model does not expect");
  }
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (std::filesystem::path(dir) / ("ckpt-" + std::to_string(step) + ".safetensors")).string();
}

std::string latest_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string best;
  int64_t best_step = -1;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view prefix = "ckpt-", suffix = ".safetensors";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix))
      continue;
    std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(),
                                                [](char c) { return c >= '0' && c <= '9'; })) continue;
    int64_t step = std::stoll(digits);
    if (step > best_step) {
      best_step = step;
      best = it->path().string();
    }
  }
  return best;
}

}  // namespace fjit::io
