// What the image data modules (idx_images, cifar, image_folder) share: the split, loader and
// transform options each declares, a dataset over labelled images held in memory, and a data
// module that cuts train/val from a seeded split of the training set.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "components/vision/image_ops.h"
#include "lib/config/config.h"
#include "lib/data/batching_options.h"
#include "lib/data/datamodule.h"
#include "lib/data/transform.h"
#include "lib/registry/options.h"

namespace kiln::data {

// The split, loader and transform options each image data module declares; its options struct
// derives from this one.
struct ImageDataOptions : BatchingOptions {
  ImageDataOptions() {
    batch_size = 128;
    num_workers = 2;
  }
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  config::Config transforms;                 // {train: [...], eval: [...]}; null: none
  std::optional<int64_t> samples_per_class;  // null: every training sample
  int64_t samples_seed = 0;
  int64_t precompute_mb = 1024;
  bool on_device = false;  // precomputed splits stay in GPU memory (a CUDA machine)
};

// `classes: [5, 6, 7]`, the labels to keep (relabelled 0..k-1 in this order), for the modules
// whose classes are numbered (idx_images, cifar); image_folder names its class folders instead.
struct LabelSubsetOptions {
  std::optional<std::vector<int64_t>> classes;
};

// Declares val_fraction, split_seed, batch_size, num_workers, prefetch and transforms on S, after
// the options `binding` already has.
template <typename S>
OptionBinding<S> AddImageDataOptions(OptionBinding<S> binding) {
  static_assert(std::is_base_of_v<ImageDataOptions, S>);
  using D = ImageDataOptions;
  binding = binding
                .Field("val_fraction", static_cast<double S::*>(&D::val_fraction),
                       "share of the training set held out for validation", InHalfOpenRange(0, 1))
                .Field("split_seed", static_cast<int64_t S::*>(&D::split_seed),
                       "seed of the train/val split");
  return AddBatchingOptions(std::move(binding), "samples")
      .Node("transforms", static_cast<config::Config S::*>(&D::transforms), OptionType::kMap,
            "{train: [...], eval: [...]} transform lists")
      .Field("samples_per_class", static_cast<std::optional<int64_t> S::*>(&D::samples_per_class),
             "keep this many training samples of each class, drawn with samples_seed after the "
             "train/val split (few-shot; null: all)",
             AtLeast(1))
      .Field("samples_seed", static_cast<int64_t S::*>(&D::samples_seed),
             "seed of the samples_per_class draw")
      .Field("precompute_mb", static_cast<int64_t S::*>(&D::precompute_mb),
             "when a training or validation split's transforms are all deterministic, apply them "
             "once when fit sets up and keep "
             "the result in memory if it takes at most this many MiB per split (0: never)",
             AtLeast(0))
      .Field(
          "on_device", static_cast<bool S::*>(&D::on_device),
          "on a CUDA machine, keep the precomputed splits in GPU memory (the GPU this process "
          "trains on), so that a batch is one index_select there and nothing is copied per step");
}

// Declares `classes` on S (a list of distinct labels).
template <typename S>
OptionBinding<S> AddLabelSubsetOption(OptionBinding<S> binding) {
  static_assert(std::is_base_of_v<LabelSubsetOptions, S>);
  return binding.Field(
      "classes",
      static_cast<std::optional<std::vector<int64_t>> S::*>(&LabelSubsetOptions::classes),
      "labels to keep, relabelled 0..k-1 in this order (null: all)", Each(AtLeast(0)));
}

// What an ImageDataModule runs with: the split, the loader and the transforms, built.
struct ImageDataSetup {
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  LoaderOptions loader;
  TransformPipeline train_transforms, eval_transforms;
  std::vector<int64_t> classes;   // labels kept, in their new order; empty: all
  int64_t samples_per_class = 0;  // 0: all
  int64_t samples_seed = 0;
  int64_t precompute_bytes = 0;  // Precomputed's max_bytes per split
  bool on_device = false;        // Precomputed's splits on the GPU

  static absl::StatusOr<ImageDataSetup> From(const ImageDataOptions& options);
  // Also takes `classes`; refuses a label listed twice (`context` names the option).
  static absl::StatusOr<ImageDataSetup> From(const ImageDataOptions& options,
                                             const LabelSubsetOptions& subset,
                                             const OptionContext& context);
};

// Images [N, C, H, W] (uint8) and int64 labels [N] in memory; without transforms an image
// becomes float in [0, 1].
class TensorImageDataset : public Dataset {
 public:
  TensorImageDataset(torch::Tensor images, torch::Tensor labels, TransformPipeline transforms);
  int64_t size() const override { return images_.size(0); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override;
  bool deterministic() const override { return transforms_.deterministic(); }
  // The image as PNG (lossless) and its label.
  absl::StatusOr<EncodedSample> Encoded(int64_t index) const override;

 private:
  torch::Tensor images_, labels_;
  TransformPipeline transforms_;
};

// Fit/validate: train and val from a seeded split of LoadTraining(); test: LoadTest();
// predict: LoadPredict() (by default the test set).
class ImageDataModule : public DataModule {
 public:
  explicit ImageDataModule(ImageDataSetup setup) : setup_(std::move(setup)) {}

  absl::Status Setup(Stage stage) override;
  std::shared_ptr<const Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const Dataset> predict_dataset() const override { return predict_; }
  LoaderOptions loader_options() const override { return setup_.loader; }
  // With `classes`, the kept classes' names in their new order (their labels when the data
  // has no names).
  std::vector<std::string> class_names() const override;
  // A raw input is an encoded image (PNG, JPEG, BMP, WebP), decoded as RawImageDecode says, then
  // put through the evaluation transforms.
  absl::Status PrepareRawInputs() override;
  absl::StatusOr<Example> RawExample(std::string_view raw) const override;

 protected:
  // How a raw image is decoded for this module's models (grayscale or RGB, a fixed size).
  virtual ImageDecodeOptions RawImageDecode() const { return {}; }

  void set_class_names(std::vector<std::string> names) { class_names_ = std::move(names); }

  // Builds a dataset over data already loaded, with the given transforms (the training and the
  // evaluation views of one set share the loaded data), and says each sample's label (for
  // `classes` and `samples_per_class`). A default-constructed maker means "no such split".
  struct DatasetMaker {
    std::function<std::shared_ptr<const Dataset>(const TransformPipeline&)> make;
    std::vector<int64_t> labels;
    explicit operator bool() const { return static_cast<bool>(make); }
    std::shared_ptr<const Dataset> operator()(const TransformPipeline& t) const { return make(t); }
  };
  static DatasetMaker InMemory(torch::Tensor images, torch::Tensor labels);

  virtual absl::StatusOr<DatasetMaker> LoadTraining() = 0;
  // A null maker: the module has no test split.
  virtual absl::StatusOr<DatasetMaker> LoadTest() = 0;
  virtual absl::StatusOr<DatasetMaker> LoadPredict() { return LoadTest(); }

 private:
  // The samples of `indices` whose label is kept, relabelled; `split` names it in errors.
  absl::StatusOr<std::shared_ptr<const Dataset>> KeepClasses(std::shared_ptr<const Dataset> all,
                                                             const std::vector<int64_t>& labels,
                                                             std::vector<int64_t> indices,
                                                             bool draw,
                                                             const std::string& split) const;

  ImageDataSetup setup_;
  std::vector<std::string> class_names_;
  std::shared_ptr<const Dataset> train_, val_, test_, predict_;
};

}  // namespace kiln::data
