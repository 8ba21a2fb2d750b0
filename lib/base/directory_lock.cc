#include "lib/base/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

// The pid the holder wrote, or 0 when the file holds none (yet).
long HolderPid(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  long pid = 0;
  if (n <= 0 ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))),
                        &pid)) {
    return 0;
  }
  return pid;
}

}  // namespace

absl::StatusOr<DirectoryLock> DirectoryLock::Acquire(const std::string& dir,
                                                     const std::string& what) {
  std::string path = absl::StrCat(dir, "/", kFileName);
  // Close-on-exec: the processes kiln starts (sweep jobs, data-parallel workers) lock what they
  // write themselves, and must not keep this lock alive after this process ends.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create the ", what, "'s lock file: ", std::strerror(errno)));
  }
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int error = errno;
    long holder = error == EWOULDBLOCK ? HolderPid(fd) : 0;
    ::close(fd);
    if (error != EWOULDBLOCK) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": cannot lock the ", what, ": ", std::strerror(error)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is in use: another kiln process (",
                     holder > 0 ? absl::StrCat("pid ", holder) : "pid unknown", ") holds its lock ",
                     path, "; wait for it to end, or choose another ", what));
  }
  // The pid as text, for the message a second process prints. A failure to write it leaves the
  // lock held all the same.
  std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) == 0) {
    ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
    (void)written;
  }
  return DirectoryLock(fd);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kiln
