// Option values that image and audio components share: an image size given as one side or
// [height, width] (ImageSize, a field type of its own), a [low, high] pair with a condition
// (PairCheck), and a range given as [low, high] or as one number around a centre (RangeOption).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "lib/config/node.h"
#include "lib/registry/options.h"

namespace kiln::data {

// A field type: one positive side (a square) or [height, width].
struct ImageSize {
  int64_t height = 0, width = 0;
};

// For a std::pair<double, double> field: [low, high] for which `ok(low, high)` holds.
OptionCheck PairCheck(std::string what, std::function<bool(double, double)> ok);
// The same for min <= low <= high <= max.
OptionCheck OrderedWithin(double min, double max);

// For a config::NodePtr field: [low, high] inside [min, max] with low <= high, or one number
// v >= 0 meaning [max(min, centre - v), centre + v] (torchvision's ColorJitter convention).
class RangeOption {
 public:
  RangeOption(double centre, double min, double max) : centre_(centre), min_(min), max_(max) {}
  OptionCheck check() const;
  // The range a value that check() accepted stands for.
  std::pair<double, double> Of(const config::Node& value) const;

 private:
  std::optional<std::pair<double, double>> Range(const config::Node& value) const;
  double centre_, min_, max_;
};

}  // namespace kiln::data

namespace kiln::internal {
template <>
struct OptionField<data::ImageSize> {
  static constexpr OptionType kType = OptionType::kAny;
  static constexpr const char* kWhat = "[height, width] or one side, positive integers";
  static config::NodePtr ToNode(const data::ImageSize& size);
  static data::ImageSize From(const config::Node& n);
  static bool Accepts(const config::Node& n);
};
}  // namespace kiln::internal
