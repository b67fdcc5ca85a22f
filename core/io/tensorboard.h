// TensorBoard event files, written without a protobuf library: the few fields a scalar needs,
// encoded by hand.
//
// A file is a sequence of TFRecords: uint64 length (little-endian), mask_crc(crc32c of those
// 8 bytes) as uint32, `length` bytes of a serialized tensorflow.Event, mask_crc(crc32c of
// them) as uint32 (core/io/crc32c.h). The first record is Event{wall_time, file_version:
// "brain.Event:2"}; each scalar is
//   Event{wall_time (1: double), step (2: int64),
//         summary (5): Summary{value (1): Value{tag (1): string, simple_value (2): float}}}
// which TensorBoard shows as a scalar plot per tag (its "Scalars" dashboard) and reads with
// EventAccumulator(dir).Scalars(tag).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fjit::io {

class EventFileWriter {
 public:
  // Creates `dir` if needed and, in it, a new file "events.out.tfevents.<seconds>.<host>"
  // (with ".<n>" appended when that name is taken), and writes the file_version event.
  // Throws std::runtime_error "<path>: <what failed>" on an I/O error, as every call does.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One scalar event; `value` is stored as a float (TensorBoard's simple_value).
  // wall_time: seconds since the Unix epoch.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  // Pushes what was written to the operating system (TensorBoard reads a file as it grows).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

// Seconds since the Unix epoch, with sub-second digits: the wall_time of events and lines.
double wall_time_now();

}  // namespace fjit::io
