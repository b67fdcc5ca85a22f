#include "core/io/atomic_file.h"
#include "core/io/atomic_file_testing.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>

namespace fjit::io {
namespace {

std::atomic<uint64_t> g_temp_counter{0};

// The test seam (atomic_file_testing.h): -1 when off.
std::atomic<int64_t> g_fail_after{-1};

std::optional<uint64_t> fail_after_seam() {
  const int64_t k = g_fail_after.load(std::memory_order_relaxed);
  if (k < 0) return std::nullopt;
  return static_cast<uint64_t>(k);
}

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// This host's name (it may hold '-': temporary names are parsed from the right).
std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 18 &&
         s.find_first_not_of("0123456789") == std::string_view::npos;
}

// True for "<anything>.tmp-<host>-<pid>-<n>" where <host> is this host and <pid> no longer
// runs. A pid of a live process, or a name this scheme did not make, is never stale.
bool is_stale_temporary(std::string_view name, const std::string& host) {
  const size_t tmp = name.rfind(".tmp-");
  if (tmp == std::string_view::npos) return false;
  std::string_view rest = name.substr(tmp + 5);  // <host>-<pid>-<n>
  const size_t last = rest.rfind('-');
  if (last == std::string_view::npos || !all_digits(rest.substr(last + 1))) return false;
  const size_t mid = rest.rfind('-', last - 1);
  if (mid == std::string_view::npos || last == 0) return false;
  const std::string_view pid = rest.substr(mid + 1, last - mid - 1);
  if (!all_digits(pid) || rest.substr(0, mid) != host) return false;
  const long long p = std::stoll(std::string(pid));
  return p > 0 && ::kill(static_cast<pid_t>(p), 0) != 0 && errno == ESRCH;
}

}  // namespace

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string host = host_name();
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (is_stale_temporary(it->path().filename().string(), host) &&
        it->is_regular_file(ignored) && fs::remove(it->path(), ignored))
      ++removed;
  }
  return removed;
}

AtomicFile::AtomicFile(std::string target)
    : target_(std::move(target)), fail_after_(fail_after_seam()) {
  remove_stale_temporaries(parent_dir(target_));
  const std::string host = host_name();
  // O_EXCL never reuses a file: a leftover from a crashed process with a recycled pid
  // makes us try the next name instead of writing into someone else's file.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = target_ + ".tmp-" + host + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(g_temp_counter.fetch_add(1));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  int err = errno;
  std::string tried = temp_;
  temp_.clear();  // nothing of ours to remove
  fail("cannot create temporary file " + tried, err);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  throw std::runtime_error(target_ + ": " + what + (err ? std::string(": ") + std::strerror(err) : ""));
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) fail("write after the file was closed", 0);
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = n;
    bool inject = false;
    if (fail_after_) {
      uint64_t room = *fail_after_ > written_ ? *fail_after_ - written_ : 0;
      if (room < chunk) {
        chunk = static_cast<size_t>(room);
        inject = true;
      }
    }
    if (chunk == 0 && inject)
      fail("write failed after " + std::to_string(written_) +
               " bytes (injected by testing::set_fail_save_after_bytes)", ENOSPC);
    ssize_t r = ::write(fd_, p, chunk);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("write failed after " + std::to_string(written_) + " bytes", errno);
    }
    p += r;
    n -= static_cast<size_t>(r);
    written_ += static_cast<uint64_t>(r);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0 || committed_) fail("commit called twice", 0);
  // Data first, then the name: a rename that reached the disk before the data would
  // leave a complete-looking file full of holes after a crash.
  if (::fsync(fd_) != 0) fail("fsync of " + temp_ + " failed", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close of " + temp_ + " failed", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    fail("cannot rename " + temp_ + " over it", errno);
  committed_ = true;
  const std::string dir = parent_dir(target_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("saved, but cannot open directory " + dir + " to fsync it", errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL); there is nothing more to do there.
  if (rc != 0 && err != EINVAL)
    fail("saved, but fsync of directory " + dir + " failed", err);
}

}  // namespace fjit::io

namespace fjit::testing {

void set_fail_save_after_bytes(std::optional<uint64_t> bytes) {
  // A count past INT64_MAX never fails a real save: it acts as that many.
  const int64_t k = bytes ? static_cast<int64_t>(std::min<uint64_t>(*bytes, INT64_MAX)) : -1;
  io::g_fail_after.store(k, std::memory_order_relaxed);
}

}  // namespace fjit::testing
