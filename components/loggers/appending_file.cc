#include "components/loggers/appending_file.h"

#include <stdio_ext.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"

namespace kiln {

absl::Status AppendingFile::Append(const std::string& bytes) {
  if (file_ == nullptr) {
    if (!started_) {
      std::string dir = path_.substr(0, path_.find_last_of('/'));
      if (dir != path_) KILN_RETURN_IF_ERROR(MakeDirs(dir));
    }
    file_ = std::fopen(path_.c_str(), started_ ? "ab" : "wb");
    if (file_ == nullptr) {
      return absl::UnavailableError(
          absl::StrCat(path_, ": cannot open for writing: ", std::strerror(errno)));
    }
    started_ = true;
    struct stat st;
    whole_size_ = ::fstat(::fileno(file_), &st) == 0 ? st.st_size : 0;
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() ||
      std::fflush(file_) != 0) {
    int error = errno;
    // A partial row would read as a corrupt one: drop what is buffered and cut the file back to
    // its last whole write.
    ::__fpurge(file_);
    std::fclose(file_);
    file_ = nullptr;
    if (::truncate(path_.c_str(), whole_size_) != 0) {
      return absl::UnavailableError(absl::StrCat(path_, ": write failed: ", std::strerror(error),
                                                 " (its last line may be cut short)"));
    }
    return absl::UnavailableError(absl::StrCat(path_, ": write failed: ", std::strerror(error)));
  }
  whole_size_ += static_cast<off_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status AppendingFile::StartWith(const std::string& contents) {
  KILN_RETURN_IF_ERROR(Close());
  std::string dir = path_.substr(0, path_.find_last_of('/'));
  if (dir != path_) KILN_RETURN_IF_ERROR(MakeDirs(dir));
  KILN_RETURN_IF_ERROR(WriteFileAtomically(path_, contents));
  started_ = true;
  return absl::OkStatus();
}

absl::Status AppendingFile::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  bool ok = std::fclose(file_) == 0;
  int error = errno;
  file_ = nullptr;
  return ok ? absl::OkStatus()
            : absl::UnavailableError(absl::StrCat(path_, ": write failed: ", std::strerror(error)));
}

}  // namespace kiln
