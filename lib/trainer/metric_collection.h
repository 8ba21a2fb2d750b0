// The metrics a task lists under `task.metrics` (torchmetrics' MetricCollection, one per stage):
//
//   metrics:
//     acc: {_target_: accuracy, stages: [train, val, test]}
//     f1_class: {_target_: f1, average: none, stages: [test]}
//
// Each entry names a registered Metric; a null entry is left out (task.metrics.f1_class=null).
// Its values are logged as STAGE/ENTRY (val/acc) and, for a value per class, STAGE/ENTRY/NAME
// (test/f1_class/cat). A task builds one in Build(), feeds it batches in its steps and returns
// Compute() from Task::EvaluationEnd.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/node.h"
#include "lib/data/datamodule.h"
#include "lib/trainer/metric.h"
#include "lib/trainer/metric_log.h"

namespace kiln {

// The doc of the `metrics` option, for every task that declares one.
inline constexpr const char* kMetricsOptionDoc =
    "metrics by name, NAME: {_target_: METRIC, ...}, logged as STAGE/NAME; a null entry is left "
    "out";

class MetricCollection {
 public:
  // Builds every entry of `metrics` (a mapping; null: none) once for each stage it runs in, and
  // sets it up. `key` names the node in messages ("task.metrics").
  absl::Status Build(const config::NodePtr& metrics, const std::string& key,
                     const MetricSetup& setup);
  // Where class names come from (the data's, once it is set up); without data, classes are
  // named by index.
  void Connect(const data::DataModule& data) { data_ = &data; }

  // Adds the batch to the stage's state; the first update after a Compute starts a new epoch.
  // Training also logs each train metric's value on this batch alone into `log` (the step's
  // value), weighted by the batch's counted targets.
  absl::Status Update(const std::string& stage, const MetricBatch& batch, MetricLog& log);
  // At the end of an epoch (training, validation, test): sums the stage's state over ranks and
  // returns the values over the whole epoch, named STAGE/ENTRY[/NAME]. The state stays until the
  // next epoch's first update, for reports.
  absl::StatusOr<std::map<std::string, double>> Compute(const std::string& stage,
                                                        const SumOverRanks& sum_over_ranks);
  // Lets the stage's metrics write their files (a confusion matrix) into `output_dir`.
  absl::Status WriteReports(const std::string& stage, const std::string& output_dir,
                            const std::vector<std::string>& class_names) const;

  // Every metric's state, as STAGE/ENTRY/STATE, and back.
  std::map<std::string, torch::Tensor> StateDict() const;
  absl::Status LoadStateDict(const std::map<std::string, torch::Tensor>& state);

 private:
  struct Entry {
    std::string name;
    std::shared_ptr<Metric> metric;
  };
  struct Stage {
    std::vector<Entry> entries;
    bool updated = false;   // since the last Compute
    bool computed = false;  // and not updated since
  };
  std::vector<std::string> ClassNames() const;

  std::map<std::string, Stage> stages_;
  const data::DataModule* data_ = nullptr;
};

}  // namespace kiln
