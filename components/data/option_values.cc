#include "components/data/option_values.h"

#include "absl/strings/str_cat.h"
#include "components/optim/option_checks.h"

namespace kiln::data {

absl::StatusOr<std::pair<int64_t, int64_t>> GetImageSize(const config::Config& cfg, const std::string& key) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, cfg.Get<config::NodePtr>(key));
  std::pair<int64_t, int64_t> size;
  if (node->is_list()) {
    KILN_ASSIGN_OR_RETURN(auto hw, cfg.Get<std::vector<int64_t>>(key));
    if (hw.size() != 2) return BadOption(cfg, key, "must be [height, width] or one side");
    size = {hw[0], hw[1]};
  } else {
    KILN_ASSIGN_OR_RETURN(int64_t side, cfg.Get<int64_t>(key));
    size = {side, side};
  }
  if (size.first < 1 || size.second < 1) return BadOption(cfg, key, "must be positive");
  return size;
}

absl::StatusOr<std::pair<double, double>> GetRange(const config::Config& cfg, const std::string& key, double centre,
                                                   double min, double max) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, cfg.Get<config::NodePtr>(key));
  std::pair<double, double> range;
  if (node->is_list()) {
    KILN_ASSIGN_OR_RETURN(auto values, cfg.Get<std::vector<double>>(key));
    if (values.size() != 2) return BadOption(cfg, key, "must be one number or [low, high]");
    range = {values[0], values[1]};
  } else {
    KILN_ASSIGN_OR_RETURN(double v, cfg.Get<double>(key));
    if (!(v >= 0)) return BadOption(cfg, key, "must be >= 0");
    range = {std::max(min, centre - v), centre + v};
  }
  if (!(range.first >= min && range.first <= range.second && range.second <= max)) {
    return BadOption(cfg, key, absl::StrCat("must lie within [", min, ", ", max, "] with low <= high"));
  }
  return range;
}

}  // namespace kiln::data
