#include "components/vision/file_bytes.h"

#include <sys/stat.h>
#include <zlib.h>

#include "absl/strings/str_cat.h"

namespace kiln::data {

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (file == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  std::string data;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(file, buf, sizeof(buf))) > 0) data.append(buf, static_cast<size_t>(n));
  int error = 0;
  const char* message = gzerror(file, &error);
  std::string error_text = message ? message : "";
  gzclose(file);
  if (n < 0 || (error != Z_OK && error != Z_STREAM_END)) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt or truncated gzip data (", error_text, ")"));
  }
  return data;
}

}  // namespace kiln::data
