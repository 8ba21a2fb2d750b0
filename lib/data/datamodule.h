// A DataModule (Lightning's): prepares data, builds the datasets of each stage, and says how to
// batch them. Built by name from the `data` config node through Registry<DataModule>.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/data/dataset.h"
#include "lib/data/loader.h"

namespace kiln::data {

enum class Stage { kFit, kValidate, kTest, kPredict };
const char* StageName(Stage stage);

class DataModule {
 public:
  static constexpr const char* kKind = "datamodule";
  virtual ~DataModule() = default;

  virtual absl::Status PrepareData() { return absl::OkStatus(); }
  virtual absl::Status Setup(Stage stage) = 0;

  // Null when the stage has no such split.
  virtual std::shared_ptr<const Dataset> train_dataset() const { return nullptr; }
  virtual std::shared_ptr<const Dataset> val_dataset() const { return nullptr; }
  virtual std::shared_ptr<const Dataset> test_dataset() const { return nullptr; }
  virtual std::shared_ptr<const Dataset> predict_dataset() const { return nullptr; }

  // Names of the classes by index (an image folder's sub-folder names), empty when unknown.
  virtual std::vector<std::string> class_names() const { return {}; }

  // Batch size and workers; the trainer adds the seed.
  virtual LoaderOptions loader_options() const = 0;
};

}  // namespace kiln::data
