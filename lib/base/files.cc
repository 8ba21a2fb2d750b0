#include "lib/base/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {

int RemoveStaleTemporaryFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (const struct dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    const size_t at = name.rfind(".tmp.");
    int pid = 0;
    if (at == std::string::npos || at == 0 || !absl::SimpleAtoi(name.substr(at + 5), &pid) ||
        pid <= 0)
      continue;
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue;  // its writer may be alive
    if (::unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char* cwd = ::getcwd(nullptr, 0);
  if (cwd == nullptr) return path;
  std::string out = std::string(cwd) + "/" + path;
  std::free(cwd);
  return out;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot be read (", std::strerror(errno), ")"));
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a folder, not a file"));
  }
  std::string out;
  if (st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return absl::DataLossError(
          absl::StrCat(path, ": cannot be read (", std::strerror(error), ")"));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  std::string current;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    current = path.substr(0, pos);
    if (current.empty()) continue;
    if (::mkdir(current.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat(current, ": cannot create directory: ", std::strerror(errno)));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  return WriteFileAtomically(path, [&](const ByteSink& sink) {
    sink(contents.data(), contents.size());
    return absl::OkStatus();
  });
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::function<absl::Status(const ByteSink& sink)>& produce) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  int write_error = 0;
  ByteSink sink = [&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0 && write_error == 0) {
      ssize_t n = ::write(fd, bytes, size);
      if (n < 0) {
        if (errno != EINTR) write_error = errno;
        continue;
      }
      bytes += n;
      size -= static_cast<size_t>(n);
    }
  };
  absl::Status produced = produce(sink);
  auto fail = [&](absl::Status status) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return status;
  };
  if (write_error != 0) {
    return fail(
        absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(write_error))));
  }
  if (!produced.ok()) return fail(produced);
  if (::fsync(fd) != 0)
    return fail(absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(errno))));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": rename failed: ", std::strerror(error)));
  }
  // The rename itself reaches the disk with the folder's fsync; a folder that cannot be opened
  // or synced (some file systems) leaves the file written all the same.
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

}  // namespace kiln
