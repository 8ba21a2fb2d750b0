#include "lib/trainer/metric_log.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kiln {

std::string FormatMetrics(const std::map<std::string, double>& metrics) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : metrics) parts.push_back(absl::StrFormat("%s %.4f", k, v));
  return absl::StrJoin(parts, "  ");
}

void MetricLog::Log(const std::string& name, double value, double weight) {
  Sum& s = sums_[name];
  s.weighted += value * weight;
  s.weight += weight;
  last_[name] = value;
}

std::map<std::string, double> MetricLog::EpochMeans() const {
  std::map<std::string, double> means;
  for (const auto& [name, s] : sums_) {
    if (s.weight > 0) means[name] = s.weighted / s.weight;
  }
  return means;
}

void MetricLog::ResetEpoch() {
  sums_.clear();
  last_.clear();
}

}  // namespace kiln
