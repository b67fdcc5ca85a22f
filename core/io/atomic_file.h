// AtomicFile: replaces a file with new content all at once, or leaves it untouched.
//
// The content goes to a temporary file next to the target (same directory, hence the same
// file system, which rename() needs to be atomic). commit() fsyncs that file, renames it
// over the target and fsyncs the directory so the rename itself survives a power cut.
// Until commit() succeeds the target is never touched; destroying an uncommitted
// AtomicFile (say, while an exception unwinds) closes and deletes the temporary file.
//
// Every failure throws std::runtime_error "<target>: <what failed>: <strerror>".
//
// Temporary files are named "<target>.tmp-<host>-<pid>-<n>". A process killed mid-save
// leaves its temporary file behind; the next AtomicFile in the same directory removes such
// leftovers, but only those written on this host by a process that no longer exists, so a
// save in progress elsewhere (another process, or another host on a shared file system) is
// never touched.
//
// Tests can make write() fail after a number of bytes, as a full disk would
// (atomic_file_testing.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace fjit::io {

class AtomicFile {
 public:
  // Removes stale temporary files of this directory (see above), then creates this one with
  // mode 0644 (less the umask).
  explicit AtomicFile(std::string target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes (all of them, or throws).
  void write(const void* data, size_t n);
  // Makes the written content the target's. Requires no earlier failure; call at most once.
  void commit();

  const std::string& temp_path() const { return temp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);

  std::string target_, temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::optional<uint64_t> fail_after_;  // the test seam's, when this file was made
  bool committed_ = false;
};

// Removes the temporary files in `dir` that a process of this host, now dead, left behind;
// returns how many. Never throws (a file it cannot remove is left where it is).
int remove_stale_temporaries(const std::string& dir);

}  // namespace fjit::io
