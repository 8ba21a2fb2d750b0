#include "components/vision/image_data_module.h"

#include "absl/strings/str_cat.h"
#include "lib/core/status_macros.h"

namespace kiln::data {

absl::StatusOr<ImageDataSetup> ImageDataSetup::From(const ImageDataOptions& options) {
  ImageDataSetup setup;
  setup.val_fraction = options.val_fraction;
  setup.split_seed = options.split_seed;
  setup.loader.batch_size = options.batch_size;
  setup.loader.num_workers = options.num_workers;
  setup.loader.prefetch = options.prefetch;
  if (!options.transforms.node()->is_null()) {
    KILN_ASSIGN_OR_RETURN(setup.train_transforms,
                          TransformPipeline::FromConfig(options.transforms, "train"));
    KILN_ASSIGN_OR_RETURN(setup.eval_transforms,
                          TransformPipeline::FromConfig(options.transforms, "eval"));
  }
  return setup;
}

TensorImageDataset::TensorImageDataset(torch::Tensor images, torch::Tensor labels, TransformPipeline transforms)
    : images_(std::move(images)), labels_(std::move(labels)), transforms_(std::move(transforms)) {}

absl::StatusOr<Example> TensorImageDataset::Get(int64_t index, SampleRng& rng) const {
  torch::Tensor image = images_[index];
  image = transforms_.empty() ? image.to(torch::kFloat32).div_(255.0) : transforms_.Apply(image, rng);
  return Example{image, labels_[index]};
}

ImageDataModule::DatasetMaker ImageDataModule::InMemory(torch::Tensor images, torch::Tensor labels) {
  return [images, labels](const TransformPipeline& transforms) -> std::shared_ptr<const Dataset> {
    return std::make_shared<TensorImageDataset>(images, labels, transforms);
  };
}

absl::Status ImageDataModule::Setup(Stage stage) {
  if (stage == Stage::kFit || stage == Stage::kValidate) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadTraining());
    std::shared_ptr<const Dataset> train_all = make(setup_.train_transforms);
    auto [train, val] = RandomSplit(train_all->size(), setup_.val_fraction, setup_.split_seed);
    train_ = Subset(train_all, std::move(train));
    val_ = val.empty() ? nullptr : Subset(make(setup_.eval_transforms), std::move(val));
  }
  if (stage == Stage::kTest) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadTest());
    test_ = make ? make(setup_.eval_transforms) : nullptr;
  }
  if (stage == Stage::kPredict) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadPredict());
    predict_ = make ? make(setup_.eval_transforms) : nullptr;
  }
  return absl::OkStatus();
}

}  // namespace kiln::data
