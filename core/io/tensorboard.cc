// TensorBoard event files (see core/io/tensorboard.h): the protobuf wire format for the
// handful of fields written, and TFRecord framing.
#include "core/io/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "core/io/crc32c.h"

namespace fjit::io {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

// Little-endian bytes of a fixed-width value (a double or a float's bits).
template <class U>
void put_le(std::string& out, U bits) {
  for (size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// int64 fields are varints of the two's-complement value (negative steps take ten bytes).
void put_int64(std::string& out, int field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create the log directory: " + ec.message());
  const double now = wall_time_now();
  const std::string base = (std::filesystem::path(dir) /
                            ("events.out.tfevents." +
                             std::to_string(static_cast<int64_t>(std::floor(now))) + "." +
                             host_name())).string();
  // "x": never append to another writer's file (two runs started in the same second).
  for (int n = 0; file_ == nullptr; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (file_ == nullptr && errno != EEXIST)
      throw std::runtime_error(path_ + ": cannot create the event file: " + std::strerror(errno));
  }
  std::string event;
  put_double(event, 1, now);
  put_bytes(event, 3, "brain.Event:2");
  try {
    write_record(event);
    flush();
  } catch (...) {
    std::fclose(file_);  // no destructor runs for a constructor that throws
    throw;
  }
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                 double wall_time) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_float(v, 2, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string event;
  put_double(event, 1, wall_time);
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void EventFileWriter::write_record(const std::string& event) {
  std::string header;
  put_le(header, static_cast<uint64_t>(event.size()));
  std::string record = header;
  put_le(record, mask_crc(crc32c(header.data(), header.size())));
  record += event;
  put_le(record, mask_crc(crc32c(event.data(), event.size())));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    throw std::runtime_error(path_ + ": cannot write an event: " + std::strerror(errno));
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0)
    throw std::runtime_error(path_ + ": cannot write an event: " + std::strerror(errno));
}

}  // namespace fjit::io
