// What `kiln predict` does with a task's predictions (Lightning's BasePredictionWriter): the task
// turns each batch's output into records (Task::PredictionRecords), and a writer component
// chosen in config stores them: `csv` (predictions.csv, the default) or `jsonl`
// (predictions.jsonl), e.g. `kiln predict ckpt_path=... +prediction_writer=jsonl`.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/config/node.h"

namespace kiln {

// One prediction: the input it is for (a file path, or the input's number), then named values
// in column order (an int, a float or a string node).
struct PredictionRecord {
  std::string source;
  std::vector<std::pair<std::string, config::NodePtr>> fields;
};

class PredictionWriter {
 public:
  static constexpr const char* kKind = "prediction_writer";
  virtual ~PredictionWriter() = default;
  // Writes the records into `output_dir`; returns the file written.
  virtual absl::StatusOr<std::string> Write(const std::string& output_dir,
                                            const std::vector<PredictionRecord>& records) = 0;
};

// The records of class probabilities [batch, classes]: class_index, class (its name when
// `class_names` has one per class), probability.
absl::StatusOr<std::vector<PredictionRecord>> ClassProbabilityRecords(
    const torch::Tensor& probabilities, const std::vector<std::string>& class_names);

}  // namespace kiln
