// Option values that image components read in several places: an image size given as one side
// or [height, width], and a range given as [low, high] or as one number around a centre.
#pragma once

#include <utility>

#include "absl/status/statusor.h"
#include "lib/config/config.h"

namespace kiln::data {

// `key` as one positive side (a square) or [height, width].
absl::StatusOr<std::pair<int64_t, int64_t>> GetImageSize(const config::Config& cfg, const std::string& key);

// `key` as [low, high] inside [min, max], or as one number v >= 0 meaning
// [max(min, centre - v), centre + v] (torchvision's ColorJitter convention).
absl::StatusOr<std::pair<double, double>> GetRange(const config::Config& cfg, const std::string& key, double centre,
                                                   double min, double max);

}  // namespace kiln::data
