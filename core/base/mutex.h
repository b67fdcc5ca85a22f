// fjit::Mutex: the lock that guards every piece of state fjit shares between threads.
//
// Promises: an exclusive/shared (reader-writer) lock built on the C++ library's
// std::shared_mutex, so ThreadSanitizer sees every acquire and release through the pthread
// calls it intercepts (Debian's prebuilt abseil is not TSan-instrumented, so its absl::Mutex
// would look like no lock at all and every correctly locked access would be reported as a
// race). The abseil thread-safety annotations stay: clang's -Wthread-safety checks
// ABSL_GUARDED_BY members against these locks as it would against absl::Mutex.
//
// Spelled as absl::Mutex is (MutexLock lock(&mu), ReaderMutexLock), so a guarded member
// reads the same either way. Not recursive; not copyable or movable.
#pragma once

#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace fjit {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void lock_shared() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void unlock_shared() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds `mu` exclusively for the scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds `mu` shared (with other readers, excluding writers) for the scope.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock_shared(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock_shared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace fjit
