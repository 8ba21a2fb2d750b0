// A DataModule (Lightning's): prepares data, builds the datasets of each stage, and says how to
// batch them. Built by name from the `data` config node through Registry<DataModule>.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

  // Raw inputs, from outside the module's files (kiln::Predictor, `kiln serve`): the bytes of an
  // image or audio file, or a UTF-8 text. PrepareRawInputs readies what the evaluation pipeline
  // needs (the tokenizer fitted on the training texts, global audio statistics, the class names,
  // the collate function); afterwards RawExample turns one input into the example the
  // evaluation pipeline makes of it (eval transforms, tokenizer, features), and may be called
  // from several threads at once. An input the pipeline cannot take is an InvalidArgument status
  // saying why; a module without raw inputs says so with Unimplemented.
  virtual absl::Status PrepareRawInputs() { return absl::OkStatus(); }
  virtual absl::StatusOr<Example> RawExample(std::string_view /*raw*/) const {
    return absl::UnimplementedError(
        "this data module does not take raw inputs (image, text or audio bytes)");
  }

  // The device the trainer runs on, set before Setup (data.on_device keeps a module's data
  // there); the CPU until then.
  void set_device(torch::Device device) { device_ = device; }
  torch::Device device() const { return device_; }

 private:
  torch::Device device_ = torch::kCPU;
};

}  // namespace kiln::data
