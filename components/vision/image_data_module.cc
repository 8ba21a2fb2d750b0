#include "components/vision/image_data_module.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "components/vision/image_ops.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"

namespace kiln::data {

namespace {

// The samples of `base` at `indices`, their labels renumbered by `new_label`.
class RelabelledSubset : public Dataset {
 public:
  RelabelledSubset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices,
                   std::map<int64_t, int64_t> new_label)
      : base_(std::move(base)), indices_(std::move(indices)), new_label_(std::move(new_label)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override {
    KILN_ASSIGN_OR_RETURN(Example example,
                          base_->Get(indices_.at(static_cast<size_t>(index)), rng));
    example.target = torch::tensor(new_label_.at(example.target.item<int64_t>()), torch::kInt64);
    return example;
  }
  std::string Source(int64_t index) const override {
    return base_->Source(indices_.at(static_cast<size_t>(index)));
  }
  bool deterministic() const override { return base_->deterministic(); }
  absl::StatusOr<EncodedSample> Encoded(int64_t index) const override {
    KILN_ASSIGN_OR_RETURN(EncodedSample files,
                          base_->Encoded(indices_.at(static_cast<size_t>(index))));
    for (auto& [ext, bytes] : files) {
      if (ext == "cls") bytes = std::to_string(new_label_.at(std::stoll(bytes)));
    }
    return files;
  }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
  std::map<int64_t, int64_t> new_label_;
};

}  // namespace

absl::StatusOr<ImageDataSetup> ImageDataSetup::From(const ImageDataOptions& options) {
  ImageDataSetup setup;
  setup.val_fraction = options.val_fraction;
  setup.split_seed = options.split_seed;
  setup.loader = options.loader();
  if (!options.transforms.node()->is_null()) {
    KILN_ASSIGN_OR_RETURN(setup.train_transforms,
                          TransformPipeline::FromConfig(options.transforms, "train"));
    KILN_ASSIGN_OR_RETURN(setup.eval_transforms,
                          TransformPipeline::FromConfig(options.transforms, "eval"));
  }
  setup.samples_per_class = options.samples_per_class.value_or(0);
  setup.samples_seed = options.samples_seed;
  // MiB to bytes, a value past what int64 bytes can hold taken as no limit.
  setup.precompute_bytes = options.precompute_mb > (std::numeric_limits<int64_t>::max() >> 20)
                               ? std::numeric_limits<int64_t>::max()
                               : options.precompute_mb << 20;
  setup.on_device = options.on_device;
  return setup;
}

absl::StatusOr<ImageDataSetup> ImageDataSetup::From(const ImageDataOptions& options,
                                                    const LabelSubsetOptions& subset,
                                                    const OptionContext& context) {
  KILN_ASSIGN_OR_RETURN(ImageDataSetup setup, From(options));
  setup.classes = subset.classes.value_or(std::vector<int64_t>{});
  std::set<int64_t> seen;
  for (int64_t label : setup.classes) {
    if (!seen.insert(label).second)
      return context.Refuse("classes",
                            absl::StrCat("distinct labels (", label, " is listed twice)"));
  }
  return setup;
}

TensorImageDataset::TensorImageDataset(torch::Tensor images, torch::Tensor labels,
                                       TransformPipeline transforms)
    : images_(std::move(images)), labels_(std::move(labels)), transforms_(std::move(transforms)) {}

absl::StatusOr<Example> TensorImageDataset::Get(int64_t index, SampleRng& rng) const {
  torch::Tensor image = images_[index];
  image =
      transforms_.empty() ? image.to(torch::kFloat32).div_(255.0) : transforms_.Apply(image, rng);
  return Example{image, labels_[index]};
}

absl::StatusOr<EncodedSample> TensorImageDataset::Encoded(int64_t index) const {
  KILN_ASSIGN_OR_RETURN(std::string png, EncodePng(AsChw(images_[index])));
  return EncodedSample{{"png", std::move(png)},
                       {"cls", std::to_string(labels_[index].item<int64_t>())}};
}

ImageDataModule::DatasetMaker ImageDataModule::InMemory(torch::Tensor images,
                                                        torch::Tensor labels) {
  DatasetMaker maker;
  maker.make = [images,
                labels](const TransformPipeline& transforms) -> std::shared_ptr<const Dataset> {
    return std::make_shared<TensorImageDataset>(images, labels, transforms);
  };
  torch::Tensor flat = labels.to(torch::kInt64).contiguous();
  maker.labels.assign(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
  return maker;
}

std::vector<std::string> ImageDataModule::class_names() const {
  if (setup_.classes.empty()) return class_names_;
  std::vector<std::string> names;
  for (int64_t label : setup_.classes) {
    bool named = label < static_cast<int64_t>(class_names_.size());
    names.push_back(named ? class_names_[static_cast<size_t>(label)] : std::to_string(label));
  }
  return names;
}

absl::StatusOr<std::shared_ptr<const Dataset>> ImageDataModule::KeepClasses(
    std::shared_ptr<const Dataset> all, const std::vector<int64_t>& labels,
    std::vector<int64_t> indices, bool draw, const std::string& split) const {
  if (setup_.classes.empty() && (!draw || setup_.samples_per_class == 0))
    return Subset(std::move(all), std::move(indices));
  std::map<int64_t, int64_t> new_label;
  for (size_t i = 0; i < setup_.classes.size(); ++i)
    new_label[setup_.classes[i]] = static_cast<int64_t>(i);
  // By class, in the split's order, so the draw does not depend on how classes interleave.
  std::map<int64_t, std::vector<int64_t>> by_class;
  for (int64_t i : indices) {
    int64_t label = labels.at(static_cast<size_t>(i));
    if (setup_.classes.empty() || new_label.count(label) > 0) by_class[label].push_back(i);
  }
  for (int64_t label : setup_.classes) {
    if (by_class.count(label) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.classes: no ", split, " sample has label ", label));
    }
  }
  std::vector<int64_t> kept;
  for (auto& [label, members] : by_class) {
    if (draw && setup_.samples_per_class > 0) {
      auto want = static_cast<size_t>(setup_.samples_per_class);
      if (members.size() < want) {
        return absl::InvalidArgumentError(absl::StrCat("data.samples_per_class=", want,
                                                       " but class ", label, " has only ",
                                                       members.size(), " ", split, " samples"));
      }
      std::mt19937_64 engine(static_cast<uint64_t>(setup_.samples_seed) * 1000003ULL +
                             static_cast<uint64_t>(label));
      for (size_t i = 0; i < want; ++i)
        std::swap(members[i], members[i + engine() % (members.size() - i)]);
      members.resize(want);
      std::sort(members.begin(), members.end());
    }
    kept.insert(kept.end(), members.begin(), members.end());
  }
  std::sort(kept.begin(), kept.end());
  if (setup_.classes.empty()) return Subset(std::move(all), std::move(kept));
  return std::make_shared<RelabelledSubset>(std::move(all), std::move(kept), std::move(new_label));
}

absl::Status ImageDataModule::PrepareRawInputs() { return PrepareData(); }

absl::StatusOr<Example> ImageDataModule::RawExample(std::string_view raw) const {
  KILN_ASSIGN_OR_RETURN(torch::Tensor image, DecodeImageBytes(raw, RawImageDecode(), "the image"));
  // The evaluation transforms draw nothing; a fixed stream keeps any that do reproducible.
  SampleRng rng(0, 0, 0);
  const TransformPipeline& eval = setup_.eval_transforms;
  image = eval.empty() ? image.to(torch::kFloat32).div_(255.0) : eval.Apply(image, rng);
  return Example{image, torch::tensor(int64_t{-1})};
}

absl::Status ImageDataModule::Setup(Stage stage) {
  if (stage == Stage::kFit || stage == Stage::kValidate) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadTraining());
    std::shared_ptr<const Dataset> train_all = make(setup_.train_transforms);
    auto [train, val] = RandomSplit(train_all->size(), setup_.val_fraction, setup_.split_seed);
    KILN_ASSIGN_OR_RETURN(
        train_, KeepClasses(train_all, make.labels, std::move(train), /*draw=*/true, "training"));
    if (val.empty()) {
      val_ = nullptr;
    } else {
      KILN_ASSIGN_OR_RETURN(val_, KeepClasses(make(setup_.eval_transforms), make.labels,
                                              std::move(val), false, "validation"));
    }
  }
  if (stage == Stage::kTest) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadTest());
    test_ = nullptr;
    if (make) {
      std::shared_ptr<const Dataset> all = make(setup_.eval_transforms);
      std::vector<int64_t> every(static_cast<size_t>(all->size()));
      std::iota(every.begin(), every.end(), 0);
      KILN_ASSIGN_OR_RETURN(test_, KeepClasses(all, make.labels, std::move(every), false, "test"));
    }
  }
  if (stage == Stage::kPredict) {
    KILN_ASSIGN_OR_RETURN(DatasetMaker make, LoadPredict());
    predict_ = make ? make(setup_.eval_transforms) : nullptr;
  }
  // Deterministic transforms run once here instead of once per sample per epoch: for the splits
  // fit reads every epoch. A split read once (validate, test, predict) would only be copied.
  if (stage == Stage::kFit) {
    if (setup_.on_device && !device().is_cuda()) {
      Logger::Instance().Warning(
          "data.on_device=true: this process runs on the CPU, so the data stay in host memory");
    }
    for (std::shared_ptr<const Dataset>* split : {&train_, &val_}) {
      if (*split == nullptr) continue;
      KILN_ASSIGN_OR_RETURN(*split,
                            Precomputed(*split, setup_.precompute_bytes,
                                        setup_.on_device ? device() : torch::Device(torch::kCPU)));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::data
