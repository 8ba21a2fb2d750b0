// data=shards: labelled images in WebDataset-layout tar shards (KEY.jpg|png|webp|bmp + KEY.cls),
// streamed with shard and buffer shuffling, split across ranks, resumable mid-epoch
// (lib/data/shards/shard_dataset.h; docs/data.md). `kiln shard` writes them from any image data
// module; WebDataset's ShardWriter writes the same layout.
#include <atomic>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "components/common/option_values.h"
#include "components/vision/image_ops.h"
#include "lib/base/status_macros.h"
#include "lib/data/batching_options.h"
#include "lib/data/datamodule.h"
#include "lib/data/shards/shard_dataset.h"
#include "lib/data/transform.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

using shards::ShardSample;

constexpr const char* kImageExtensions[] = {"jpg", "jpeg", "png", "webp", "bmp"};
constexpr const char* kLabelExtensions[] = {"cls", "class", "label"};

struct ShardsSetup {
  std::string train, val, test, predict;  // "" when not given
  int64_t shuffle_buffer = 1000;
  ImageDecodeOptions decode;
  TransformPipeline train_transforms, eval_transforms;
  bool skip_corrupt = false;
  bool verify = false;
  LoaderOptions loader;
};

// One sample's image and label; a sample that cannot be used is an error naming its shard and key,
// or, with on_corrupt=skip, a warning and an example without input (the loader leaves it out).
class SampleDecoder {
 public:
  SampleDecoder(ImageDecodeOptions decode, TransformPipeline transforms, bool skip_corrupt,
                bool need_label)
      : decode_(decode),
        transforms_(std::move(transforms)),
        skip_corrupt_(skip_corrupt),
        need_label_(need_label) {}

  absl::StatusOr<Example> operator()(const ShardSample& sample, const std::string& url,
                                     SampleRng& rng) const {
    auto example = Decode(sample, url, rng);
    if (example.ok() || !skip_corrupt_) return example;
    Logger::Instance().Warning(absl::StrCat("skipped: ", example.status().message()));
    return Example{};
  }

 private:
  absl::StatusOr<Example> Decode(const ShardSample& sample, const std::string& url,
                                 SampleRng& rng) const {
    const std::string where = absl::StrCat("shard ", url, ": sample ", sample.key);
    const std::string* image = nullptr;
    std::string ext;
    for (const char* e : kImageExtensions) {
      if ((image = sample.Find(e)) != nullptr) {
        ext = e;
        break;
      }
    }
    if (image == nullptr)
      return absl::DataLossError(absl::StrCat(where, " has no image (.jpg, .png, .webp or .bmp)"));
    int64_t label = -1;
    const std::string* label_text = nullptr;
    for (const char* e : kLabelExtensions) {
      if ((label_text = sample.Find(e)) != nullptr) break;
    }
    if (label_text != nullptr) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*label_text), &label) || label < 0) {
        return absl::DataLossError(absl::StrCat(
            where, ": its label '", absl::StripAsciiWhitespace(*label_text).substr(0, 40),
            "' is not a class index"));
      }
    } else if (need_label_) {
      return absl::DataLossError(absl::StrCat(where, " has no label (.cls)"));
    }
    KILN_ASSIGN_OR_RETURN(torch::Tensor input, DecodeAndTransform(*image, decode_, transforms_, rng,
                                                                  absl::StrCat(where, ".", ext)));
    return Example{std::move(input), torch::tensor(label, torch::kInt64)};
  }

  ImageDecodeOptions decode_;
  TransformPipeline transforms_;
  bool skip_corrupt_, need_label_;
};

class Shards : public DataModule {
 public:
  explicit Shards(ShardsSetup setup) : setup_(std::move(setup)) {}

  absl::Status Setup(Stage stage) override {
    if (stage == Stage::kFit || stage == Stage::kValidate) {
      if (setup_.train.empty() && stage == Stage::kFit) {
        return absl::InvalidArgumentError("data.train_shards: fit needs the training shards");
      }
      if (!setup_.train.empty()) {
        KILN_ASSIGN_OR_RETURN(
            train_, Open(setup_.train, "data.train_shards", setup_.train_transforms, true));
      }
      if (!setup_.val.empty()) {
        KILN_ASSIGN_OR_RETURN(val_,
                              Open(setup_.val, "data.val_shards", setup_.eval_transforms, true));
      }
    }
    if (stage == Stage::kTest && !setup_.test.empty()) {
      KILN_ASSIGN_OR_RETURN(test_,
                            Open(setup_.test, "data.test_shards", setup_.eval_transforms, true));
    }
    if (stage == Stage::kPredict) {
      const std::string& spec = setup_.predict.empty() ? setup_.test : setup_.predict;
      if (!spec.empty()) {
        KILN_ASSIGN_OR_RETURN(
            predict_,
            Open(spec, setup_.predict.empty() ? "data.test_shards" : "data.predict_shards",
                 setup_.eval_transforms, false));
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const Dataset> predict_dataset() const override { return predict_; }
  std::vector<std::string> class_names() const override { return class_names_; }
  LoaderOptions loader_options() const override { return setup_.loader; }

  // Raw inputs need nothing read ahead (class names come from an index when a stage is set up).
  absl::Status PrepareRawInputs() override { return absl::OkStatus(); }
  absl::StatusOr<Example> RawExample(std::string_view raw) const override {
    SampleRng rng(0, 0, 0);
    KILN_ASSIGN_OR_RETURN(
        torch::Tensor input,
        DecodeAndTransform(raw, setup_.decode, setup_.eval_transforms, rng, "the image"));
    return Example{std::move(input), torch::tensor(int64_t{-1})};
  }

 private:
  absl::StatusOr<std::shared_ptr<const Dataset>> Open(const std::string& spec,
                                                      const std::string& option,
                                                      const TransformPipeline& transforms,
                                                      bool need_label) {
    KILN_ASSIGN_OR_RETURN(shards::ShardSet set, shards::OpenShardSet(spec, option));
    if (setup_.verify) {
      absl::Status verified = shards::VerifyShardSet(set);
      if (!verified.ok())
        return absl::DataLossError(absl::StrCat(option, ": ", verified.message()));
    }
    if (class_names_.empty()) class_names_ = set.classes;
    SampleDecoder decoder(setup_.decode, transforms, setup_.skip_corrupt, need_label);
    return std::shared_ptr<const Dataset>(
        std::make_shared<shards::ShardDataset>(std::move(set), decoder, setup_.shuffle_buffer));
  }

  ShardsSetup setup_;
  std::vector<std::string> class_names_;
  std::shared_ptr<const Dataset> train_, val_, test_, predict_;
};

struct ShardsOptions : BatchingOptions {
  ShardsOptions() {
    batch_size = 128;
    num_workers = 2;
  }
  std::optional<std::string> train_shards, val_shards, test_shards, predict_shards;
  int64_t shuffle_buffer = 1000;
  config::Config transforms;
  std::optional<ImageSize> size;
  bool grayscale = false;
  std::string on_corrupt = "fail";
  bool verify = false;
};

KILN_REGISTER_BOUND(
    DataModule, "shards",
    "Labelled images in WebDataset-layout tar shards (KEY.jpg + KEY.cls), streamed with shard and "
    "buffer "
    "shuffling, split across ranks, resumable mid-epoch",
    AddBatchingOptions(
        OptionBinding<ShardsOptions>()
            .Field("train_shards", &ShardsOptions::train_shards,
                   "the training shards: an index written by kiln shard (train.index.json), or "
                   "shard URLs with "
                   "{000..099} ranges and globs, local paths or pipe:CMD (null: no training split)")
            .Field("val_shards", &ShardsOptions::val_shards,
                   "the validation shards, as train_shards (null: none)")
            .Field("test_shards", &ShardsOptions::test_shards,
                   "the test shards, as train_shards (null: none)")
            .Field("predict_shards", &ShardsOptions::predict_shards,
                   "the shards kiln predict reads (null: the test shards); labels are optional")
            .Field("shuffle_buffer", &ShardsOptions::shuffle_buffer,
                   "samples in the training shuffle buffer (memory holds this many samples' bytes)",
                   AtLeast(1))
            .Node("transforms", &ShardsOptions::transforms, OptionType::kMap,
                  "{train: [...], eval: [...]} transform lists")
            .Field("size", &ShardsOptions::size,
                   "resize every image to [height, width] when decoding (null keeps sizes)")
            .Field("grayscale", &ShardsOptions::grayscale,
                   "decode as one grayscale channel instead of RGB")
            .Field("on_corrupt", &ShardsOptions::on_corrupt,
                   "a sample whose image cannot be decoded or that has no label: fail (one line "
                   "naming the shard "
                   "and key) or skip (a warning; the batch is one smaller)",
                   OneOf({"fail", "skip"}))
            .Field("verify", &ShardsOptions::verify,
                   "check each local shard's size and SHA-256 against its index before reading"),
        "samples"),
    [](const ShardsOptions& o) -> absl::StatusOr<std::shared_ptr<DataModule>> {
      ShardsSetup setup;
      setup.train = o.train_shards.value_or("");
      setup.val = o.val_shards.value_or("");
      setup.test = o.test_shards.value_or("");
      setup.predict = o.predict_shards.value_or("");
      setup.shuffle_buffer = o.shuffle_buffer;
      ImageSize size = o.size.value_or(ImageSize{});
      setup.decode = ImageDecodeOptions{o.grayscale, size.height, size.width};
      if (!o.transforms.node()->is_null()) {
        KILN_ASSIGN_OR_RETURN(setup.train_transforms,
                              TransformPipeline::FromConfig(o.transforms, "train"));
        KILN_ASSIGN_OR_RETURN(setup.eval_transforms,
                              TransformPipeline::FromConfig(o.transforms, "eval"));
      }
      setup.skip_corrupt = o.on_corrupt == "skip";
      setup.verify = o.verify;
      setup.loader = o.loader();
      return std::make_shared<Shards>(std::move(setup));
    });

}  // namespace
}  // namespace kiln::data
