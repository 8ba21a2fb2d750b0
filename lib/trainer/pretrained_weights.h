// Starting a model from someone else's weights (`model.init_from`): a safetensors file or a kiln
// checkpoint, loaded partially (`init_ignore` globs), under renamed prefixes (`init_map`) and
// strictly or not (`init_strict`), with a report of what was loaded, ignored, missing, mismatched
// and unused.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/trainer/freezing.h"

namespace kiln {

// How weights from a file go into a model.
struct WeightLoadSpec {
  std::string path;                                         // what `state` was read from
  std::vector<std::string> ignore;                          // globs over the model's names
  std::vector<std::pair<std::string, std::string>> rename;  // file prefix -> model prefix
  bool strict = true;                      // every model entry that is not ignored must be loaded
  std::string option = "model.init_from";  // what the messages name as the source's option
};

// What a load did, entry by entry (parameters and buffers), for the log table.
struct WeightLoadReport {
  struct Row {
    std::string status;  // loaded, ignored, missing, mismatched, unused
    std::string name;    // the model's name (for unused: the file's name)
    std::string model_shape, file_shape;
  };
  std::vector<Row> rows;
  int64_t Count(const std::string& status) const;
  // "init_from FILE: 8 loaded, 2 ignored, 0 missing, 0 mismatched, 0 unused" and one line per row.
  std::string Table() const;
};

// The tensors of a safetensors file or of a kiln checkpoint's model (told apart by content).
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadPretrainedWeights(const std::string& path);

// Copies `state` into `module` as `spec` says. Refused, touching nothing: a shape mismatch of an
// entry not ignored (naming both shapes and `init_ignore`), a missing entry when strict (naming
// `init_ignore` and `init_strict`), a glob or prefix that matches nothing.
absl::StatusOr<WeightLoadReport> LoadPretrainedWeights(
    const std::map<std::string, torch::Tensor>& state, torch::nn::Module& module,
    const WeightLoadSpec& spec);

}  // namespace kiln
