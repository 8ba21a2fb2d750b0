// MNIST-style IDX files (gzip-compressed or raw): Fashion-MNIST from Debian's
// dataset-fashion-mnist, MNIST, KMNIST. The training file is split into train and val from a seed.
#include <sys/stat.h>
#include <zlib.h>

#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "lib/data/datamodule.h"
#include "lib/data/sample_rng.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (file == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  std::string data;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(file, buf, sizeof(buf))) > 0) data.append(buf, static_cast<size_t>(n));
  int error = 0;
  const char* message = gzerror(file, &error);
  std::string error_text = message ? message : "";
  gzclose(file);
  if (n < 0 || (error != Z_OK && error != Z_STREAM_END)) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated gzip data (", error_text, ")"));
  }
  return data;
}

uint32_t BigEndian(const std::string& data, size_t offset) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(data[offset + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

// Returns the uint8 tensor [N, dims...] of an IDX file whose element type is unsigned byte.
absl::StatusOr<torch::Tensor> ReadIdx(const std::string& path, int expected_dims) {
  KILN_ASSIGN_OR_RETURN(std::string data, ReadMaybeGzip(path));
  if (data.size() < 4 || data[0] != 0 || data[1] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file (bad magic number)"));
  }
  if (static_cast<unsigned char>(data[2]) != 0x08) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": IDX element type must be unsigned byte (0x08)"));
  }
  int dims = static_cast<unsigned char>(data[3]);
  if (dims != expected_dims) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an IDX file with ", expected_dims, " dimensions, found ", dims));
  }
  size_t header = 4 + 4 * static_cast<size_t>(dims);
  if (data.size() < header) return absl::DataLossError(absl::StrCat(path, ": truncated IDX header"));
  std::vector<int64_t> shape;
  size_t count = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(BigEndian(data, 4 + 4 * static_cast<size_t>(d)));
    count *= static_cast<size_t>(shape.back());
  }
  if (data.size() - header != count) {
    return absl::DataLossError(absl::StrCat(path, ": truncated IDX file: the header promises ", count,
                                            " bytes of data, the file has ", data.size() - header));
  }
  torch::Tensor tensor = torch::empty(shape, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), data.data() + header, count);
  return tensor;
}

class IdxImageDataset : public Dataset {
 public:
  IdxImageDataset(torch::Tensor images, torch::Tensor labels, TransformPipeline transforms)
      : images_(std::move(images)), labels_(std::move(labels)), transforms_(std::move(transforms)) {}
  int64_t size() const override { return images_.size(0); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override {
    torch::Tensor image = images_[index].unsqueeze(0);
    image = transforms_.empty() ? image.to(torch::kFloat32).div_(255.0) : transforms_.Apply(image, rng);
    return Example{image, labels_[index]};
  }

 private:
  torch::Tensor images_, labels_;
  TransformPipeline transforms_;
};

struct IdxOptions {
  std::string root, train_images, train_labels, test_images, test_labels;
  double val_fraction = 0.1;
  int64_t split_seed = 0;
  LoaderOptions loader;
};

class IdxImages : public DataModule {
 public:
  IdxImages(IdxOptions options, TransformPipeline train, TransformPipeline eval)
      : options_(std::move(options)), train_transforms_(std::move(train)), eval_transforms_(std::move(eval)) {}

  absl::Status Setup(Stage stage) override {
    if (stage == Stage::kFit || stage == Stage::kValidate) {
      KILN_ASSIGN_OR_RETURN(auto pair, Load(options_.train_images, options_.train_labels));
      int64_t n = pair.first.size(0);
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::mt19937_64 engine(MixSeed(static_cast<uint64_t>(options_.split_seed), 0x53504c4954ULL));
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[engine() % i]);
      auto val_count = static_cast<size_t>(static_cast<double>(n) * options_.val_fraction);
      std::vector<int64_t> val(order.begin(), order.begin() + static_cast<ptrdiff_t>(val_count));
      std::vector<int64_t> train(order.begin() + static_cast<ptrdiff_t>(val_count), order.end());
      auto train_all = std::make_shared<IdxImageDataset>(pair.first, pair.second, train_transforms_);
      auto eval_all = std::make_shared<IdxImageDataset>(pair.first, pair.second, eval_transforms_);
      train_ = Subset(train_all, std::move(train));
      val_ = val.empty() ? nullptr : Subset(eval_all, std::move(val));
    }
    if (stage == Stage::kTest || stage == Stage::kPredict) {
      KILN_ASSIGN_OR_RETURN(auto pair, Load(options_.test_images, options_.test_labels));
      test_ = std::make_shared<IdxImageDataset>(pair.first, pair.second, eval_transforms_);
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const Dataset> predict_dataset() const override { return test_; }
  LoaderOptions loader_options() const override { return options_.loader; }

 private:
  absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> Load(const std::string& images_file,
                                                               const std::string& labels_file) {
    std::string images_path = options_.root + "/" + images_file;
    std::string labels_path = options_.root + "/" + labels_file;
    KILN_ASSIGN_OR_RETURN(torch::Tensor images, ReadIdx(images_path, 3));
    KILN_ASSIGN_OR_RETURN(torch::Tensor labels, ReadIdx(labels_path, 1));
    if (images.size(0) != labels.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(images_path, " has ", images.size(0), " images but ",
                                                     labels_path, " has ", labels.size(0), " labels"));
    }
    return std::make_pair(images, labels.to(torch::kInt64));
  }

  IdxOptions options_;
  TransformPipeline train_transforms_, eval_transforms_;
  std::shared_ptr<const Dataset> train_, val_, test_;
};

KILN_REGISTER(DataModule, "idx_images", "Images and labels in IDX files (MNIST, Fashion-MNIST), gzip or raw",
              OptionSchema()
                  .Required("root", OptionType::kString, "folder holding the four IDX files")
                  .String("train_images", "train-images-idx3-ubyte.gz", "training images file")
                  .String("train_labels", "train-labels-idx1-ubyte.gz", "training labels file")
                  .String("test_images", "t10k-images-idx3-ubyte.gz", "test images file")
                  .String("test_labels", "t10k-labels-idx1-ubyte.gz", "test labels file")
                  .Float("val_fraction", 0.1, "share of the training file held out for validation")
                  .Int("split_seed", 1234, "seed of the train/val split")
                  .Int("batch_size", 128, "samples per batch")
                  .Int("num_workers", 2, "threads loading batches (0: load on the training thread)")
                  .Int("prefetch", 4, "batches loaded ahead at most")
                  .Add("transforms", OptionType::kMap, "null", "{train: [...], eval: [...]} transform lists"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<DataModule>> {
                IdxOptions o;
                KILN_ASSIGN_OR_RETURN(o.root, cfg.Get<std::string>("root"));
                KILN_ASSIGN_OR_RETURN(o.train_images, cfg.Get<std::string>("train_images"));
                KILN_ASSIGN_OR_RETURN(o.train_labels, cfg.Get<std::string>("train_labels"));
                KILN_ASSIGN_OR_RETURN(o.test_images, cfg.Get<std::string>("test_images"));
                KILN_ASSIGN_OR_RETURN(o.test_labels, cfg.Get<std::string>("test_labels"));
                KILN_ASSIGN_OR_RETURN(o.val_fraction, cfg.Get<double>("val_fraction"));
                KILN_ASSIGN_OR_RETURN(o.split_seed, cfg.Get<int64_t>("split_seed"));
                KILN_ASSIGN_OR_RETURN(o.loader.batch_size, cfg.Get<int64_t>("batch_size"));
                KILN_ASSIGN_OR_RETURN(o.loader.num_workers, cfg.Get<int>("num_workers"));
                KILN_ASSIGN_OR_RETURN(o.loader.prefetch, cfg.Get<int>("prefetch"));
                if (o.val_fraction < 0 || o.val_fraction >= 1) {
                  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("val_fraction"),
                                                                 "' must be in [0, 1)"));
                }
                if (o.loader.batch_size < 1) {
                  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("batch_size"), "' must be >= 1"));
                }
                TransformPipeline train, eval;
                if (cfg.Has("transforms") && !cfg.Get<config::NodePtr>("transforms").value()->is_null()) {
                  KILN_ASSIGN_OR_RETURN(config::Config transforms, cfg.Sub("transforms"));
                  KILN_ASSIGN_OR_RETURN(train, TransformPipeline::FromConfig(transforms, "train"));
                  KILN_ASSIGN_OR_RETURN(eval, TransformPipeline::FromConfig(transforms, "eval"));
                }
                return std::make_shared<IdxImages>(std::move(o), std::move(train), std::move(eval));
              });

}  // namespace
}  // namespace kiln::data
