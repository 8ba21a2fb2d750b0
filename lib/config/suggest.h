// "Did you mean ...?" suggestions from edit distance, for unknown keys, groups and names.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln::config {

size_t EditDistance(absl::string_view a, absl::string_view b);

// The candidates closest to `name` (at most `limit`), nearest first; only plausible ones.
std::vector<std::string> ClosestNames(absl::string_view name,
                                      const std::vector<std::string>& candidates, size_t limit = 3);

// " (did you mean 'x'?)", " (did you mean 'x' or 'y'?)", or "" when nothing is close.
std::string DidYouMean(absl::string_view name, const std::vector<std::string>& candidates);

}  // namespace kiln::config
