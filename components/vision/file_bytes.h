// A data file's bytes, gunzipped when it is gzip-compressed, with errors that name the file.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kiln::data {

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path);

}  // namespace kiln::data
