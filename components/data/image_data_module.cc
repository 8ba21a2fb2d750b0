#include "components/data/image_data_module.h"

#include "absl/strings/str_cat.h"
#include "components/optim/option_checks.h"
#include "lib/core/status_macros.h"

namespace kiln::data {
namespace {

bool IsSet(const config::Config& cfg, const std::string& key) {
  return cfg.Has(key) && !cfg.Get<config::NodePtr>(key).value()->is_null();
}

}  // namespace

OptionSchema& AddImageDataOptions(OptionSchema& schema) {
  return schema.Float("val_fraction", 0.1, "share of the training set held out for validation")
      .Int("split_seed", 1234, "seed of the train/val split")
      .Int("batch_size", 128, "samples per batch")
      .Int("num_workers", 2, "threads loading batches (0: load on the training thread)")
      .Int("prefetch", 4, "batches loaded ahead at most")
      .Add("transforms", OptionType::kMap, "null", "{train: [...], eval: [...]} transform lists");
}

absl::StatusOr<ImageDataOptions> ReadImageDataOptions(const config::Config& cfg) {
  ImageDataOptions o;
  KILN_ASSIGN_OR_RETURN(o.val_fraction, cfg.Get<double>("val_fraction"));
  KILN_ASSIGN_OR_RETURN(o.split_seed, cfg.Get<int64_t>("split_seed"));
  KILN_ASSIGN_OR_RETURN(o.loader.batch_size, cfg.Get<int64_t>("batch_size"));
  KILN_ASSIGN_OR_RETURN(o.loader.num_workers, cfg.Get<int>("num_workers"));
  KILN_ASSIGN_OR_RETURN(o.loader.prefetch, cfg.Get<int>("prefetch"));
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) return BadOption(cfg, "val_fraction", "must be in [0, 1)");
  if (o.loader.batch_size < 1) return BadOption(cfg, "batch_size", "must be >= 1");
  if (o.loader.num_workers < 0) return BadOption(cfg, "num_workers", "must be >= 0");
  if (o.loader.prefetch < 1) return BadOption(cfg, "prefetch", "must be >= 1");
  if (IsSet(cfg, "transforms")) {
    KILN_ASSIGN_OR_RETURN(config::Config transforms, cfg.Sub("transforms"));
    KILN_ASSIGN_OR_RETURN(o.train_transforms, TransformPipeline::FromConfig(transforms, "train"));
    KILN_ASSIGN_OR_RETURN(o.eval_transforms, TransformPipeline::FromConfig(transforms, "eval"));
  }
  return o;
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
    std::shared_ptr<const Dataset> train_all = make(options_.train_transforms);
    auto [train, val] = RandomSplit(train_all->size(), options_.val_fraction, options_.split_seed);
    train_ = Subset(train_all, std::move(train));
    val_ = val.empty() ? nullptr : Subset(make(options_.eval_transforms), std::move(val));
  }
  if (stage == Stage::kTest) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadTest());
    test_ = make ? make(options_.eval_transforms) : nullptr;
  }
  if (stage == Stage::kPredict) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadPredict());
    predict_ = make ? make(options_.eval_transforms) : nullptr;
  }
  return absl::OkStatus();
}

}  // namespace kiln::data
