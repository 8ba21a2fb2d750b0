// What the image data modules (idx_images, cifar, image_folder) share: the split, loader and
// transform options each declares, a dataset over labelled images held in memory, and a data
// module that cuts train/val from a seeded split of the training set.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/data/datamodule.h"
#include "lib/data/transform.h"
#include "lib/registry/options.h"

namespace kiln::data {

struct ImageDataOptions {
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  LoaderOptions loader;
  TransformPipeline train_transforms, eval_transforms;
};

// Declares val_fraction, split_seed, batch_size, num_workers, prefetch and transforms.
OptionSchema& AddImageDataOptions(OptionSchema& schema);
// Reads and checks what AddImageDataOptions declared.
absl::StatusOr<ImageDataOptions> ReadImageDataOptions(const config::Config& cfg);

// Images [N, C, H, W] (uint8) and int64 labels [N] in memory; without transforms an image
// becomes float in [0, 1].
class TensorImageDataset : public Dataset {
 public:
  TensorImageDataset(torch::Tensor images, torch::Tensor labels, TransformPipeline transforms);
  int64_t size() const override { return images_.size(0); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override;

 private:
  torch::Tensor images_, labels_;
  TransformPipeline transforms_;
};

// Fit/validate: train and val from a seeded split of LoadTraining(); test: LoadTest();
// predict: LoadPredict() (by default the test set).
class ImageDataModule : public DataModule {
 public:
  explicit ImageDataModule(ImageDataOptions options) : options_(std::move(options)) {}

  absl::Status Setup(Stage stage) override;
  std::shared_ptr<const Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const Dataset> predict_dataset() const override { return predict_; }
  LoaderOptions loader_options() const override { return options_.loader; }
  std::vector<std::string> class_names() const override { return class_names_; }

 protected:
  void set_class_names(std::vector<std::string> names) { class_names_ = std::move(names); }

  // Builds a dataset over data already loaded, with the given transforms (the training and the
  // evaluation views of one set share the loaded data).
  using DatasetMaker = std::function<std::shared_ptr<const Dataset>(const TransformPipeline&)>;
  static DatasetMaker InMemory(torch::Tensor images, torch::Tensor labels);

  virtual absl::StatusOr<DatasetMaker> LoadTraining() = 0;
  // A null maker: the module has no test split.
  virtual absl::StatusOr<DatasetMaker> LoadTest() = 0;
  virtual absl::StatusOr<DatasetMaker> LoadPredict() { return LoadTest(); }

 private:
  ImageDataOptions options_;
  std::vector<std::string> class_names_;
  std::shared_ptr<const Dataset> train_, val_, test_, predict_;
};

}  // namespace kiln::data
