// An advisory lock on a folder that one kiln process writes (a run directory, a sweep directory):
// `flock(2)` on DIR/.kiln.lock, which holds the holder's pid as text. The kernel releases the lock
// however the holder ends (SIGKILL too), so a lock file left by a dead process never blocks.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kiln {

class DirectoryLock {
 public:
  // The lock file's name inside the locked folder.
  static constexpr const char* kFileName = ".kiln.lock";

  // Locks `dir` (which must exist) without waiting. When another process holds it, the error is
  // one line naming the folder and the holder's pid; `what` names the folder in it ("run
  // directory", "sweep directory").
  static absl::StatusOr<DirectoryLock> Acquire(const std::string& dir, const std::string& what);

  DirectoryLock() = default;
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  // Releases the lock; the file stays (removing it would let two processes lock two files).
  ~DirectoryLock();

  bool held() const { return fd_ >= 0; }

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace kiln
