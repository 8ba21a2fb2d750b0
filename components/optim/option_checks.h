// One-line errors for option values that have the right type but an unusable value, naming the
// full key and where it was set: "option 'optimizer.lr' must be > 0, got 0.0 (set at a.yaml:2)".
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/config/config.h"

namespace kiln {

// `requirement` completes "option 'KEY' ...", e.g. "must be > 0"; the value is appended.
absl::Status BadOption(const config::Config& cfg, absl::string_view key,
                       absl::string_view requirement);

// A number option's value, refused with BadOption unless > 0 (GetPositive) or >= 0.
absl::StatusOr<double> GetPositive(const config::Config& cfg, absl::string_view key);
absl::StatusOr<double> GetNonNegative(const config::Config& cfg, absl::string_view key);

}  // namespace kiln
