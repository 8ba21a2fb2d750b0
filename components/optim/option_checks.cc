// One-line errors for unusable option values, shared by optimizers and schedulers.
#include "components/optim/option_checks.h"

#include "absl/strings/str_cat.h"
#include "lib/config/yaml_io.h"

namespace kiln {

absl::Status BadOption(const config::Config& cfg, absl::string_view key,
                       absl::string_view requirement) {
  auto node = cfg.Get<config::NodePtr>(key);
  std::string got = node.ok() ? config::ScalarToYaml(**node) : "nothing";
  std::string where = cfg.WhereSet(key);
  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey(key), "' ", requirement,
                                                 ", got ", got,
                                                 where.empty() ? "" : " (set at " + where + ")"));
}

absl::StatusOr<double> GetPositive(const config::Config& cfg, absl::string_view key) {
  KILN_ASSIGN_OR_RETURN(double value, cfg.Get<double>(key));
  // Written so NaN fails too.
  if (!(value > 0)) return BadOption(cfg, key, "must be > 0");
  return value;
}

absl::StatusOr<double> GetNonNegative(const config::Config& cfg, absl::string_view key) {
  KILN_ASSIGN_OR_RETURN(double value, cfg.Get<double>(key));
  if (!(value >= 0)) return BadOption(cfg, key, "must be >= 0");
  return value;
}

}  // namespace kiln
