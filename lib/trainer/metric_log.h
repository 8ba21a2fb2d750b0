// What a task logs during a stage: per-step values and their epoch means (weighted by batch
// size), e.g. "train/loss", "val/acc". Loggers and callbacks read it; ModelCheckpoint and
// EarlyStopping monitor its epoch means.
#pragma once

#include <map>
#include <string>

namespace kiln {

// "name value  name value" with 4 decimals, for the log.
std::string FormatMetrics(const std::map<std::string, double>& metrics);

class MetricLog {
 public:
  // Records `value` for this step; the epoch mean weighs it by `weight` (e.g. the batch size).
  void Log(const std::string& name, double value, double weight = 1.0);
  // Epoch means so far, and the values of the latest step.
  std::map<std::string, double> EpochMeans() const;
  const std::map<std::string, double>& last() const { return last_; }
  void ResetEpoch();

 private:
  struct Sum {
    double weighted = 0, weight = 0;
  };
  std::map<std::string, Sum> sums_;
  std::map<std::string, double> last_;
};

}  // namespace kiln
