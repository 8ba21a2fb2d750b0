// A kiln plugin that adds a data module: points drawn around one Gaussian center per class,
// a classification problem an MLP learns in seconds. Centers and points come from `seed`,
// so every run sees the same data.
//   kiln train --plugin PATH/libgaussian_blobs.so experiment=blobs
#include "absl/strings/str_cat.h"
#include <kiln/core.h>
#include <kiln/data.h>
#include <kiln/plugin.h>

namespace {

using kiln::data::Dataset;
using kiln::data::Example;
using kiln::data::SampleRng;
using kiln::data::Stage;

class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor points, torch::Tensor labels) : points_(std::move(points)), labels_(std::move(labels)) {}
  int64_t size() const override { return points_.size(0); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng&) const override {
    return Example{points_[index], labels_[index]};
  }

 private:
  torch::Tensor points_, labels_;
};

struct BlobOptions {
  int64_t num_classes, dims, train_size, val_size, test_size, seed;
  double spread;
  kiln::data::LoaderOptions loader;
};

class GaussianBlobs : public kiln::data::DataModule {
 public:
  explicit GaussianBlobs(BlobOptions o) : o_(o) {}

  absl::Status Setup(Stage) override {
    if (train_) return absl::OkStatus();
    torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(static_cast<uint64_t>(o_.seed));
    torch::Tensor centers = torch::randn({o_.num_classes, o_.dims}, gen) * 3.0;
    auto draw = [&](int64_t n) {
      torch::Tensor labels = torch::randint(o_.num_classes, {n}, gen, torch::kLong);
      torch::Tensor points = centers.index_select(0, labels) + torch::randn({n, o_.dims}, gen) * o_.spread;
      return std::make_shared<TensorDataset>(points, labels);
    };
    train_ = draw(o_.train_size);
    val_ = draw(o_.val_size);
    test_ = draw(o_.test_size);
    return absl::OkStatus();
  }

  std::shared_ptr<const Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const Dataset> predict_dataset() const override { return test_; }
  kiln::data::LoaderOptions loader_options() const override { return o_.loader; }

 private:
  BlobOptions o_;
  std::shared_ptr<Dataset> train_, val_, test_;
};

absl::StatusOr<std::shared_ptr<kiln::data::DataModule>> Build(const kiln::config::Config& cfg) {
  BlobOptions o;
  KILN_ASSIGN_OR_RETURN(o.num_classes, cfg.Get<int64_t>("num_classes"));
  KILN_ASSIGN_OR_RETURN(o.dims, cfg.Get<int64_t>("dims"));
  KILN_ASSIGN_OR_RETURN(o.train_size, cfg.Get<int64_t>("train_size"));
  KILN_ASSIGN_OR_RETURN(o.val_size, cfg.Get<int64_t>("val_size"));
  KILN_ASSIGN_OR_RETURN(o.test_size, cfg.Get<int64_t>("test_size"));
  KILN_ASSIGN_OR_RETURN(o.seed, cfg.Get<int64_t>("seed"));
  KILN_ASSIGN_OR_RETURN(o.spread, cfg.Get<double>("spread"));
  KILN_ASSIGN_OR_RETURN(o.loader.batch_size, cfg.Get<int64_t>("batch_size"));
  KILN_ASSIGN_OR_RETURN(o.loader.num_workers, cfg.Get<int>("num_workers"));
  for (const char* key : {"num_classes", "dims", "train_size", "val_size", "test_size", "batch_size"}) {
    KILN_ASSIGN_OR_RETURN(int64_t value, cfg.Get<int64_t>(key));
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey(key), "' must be at least 1 (set at ",
                                                     cfg.WhereSet(key), ")"));
    }
  }
  return std::make_shared<GaussianBlobs>(o);
}

void Register(kiln::Registrar& registrar) {
  registrar.Add<kiln::data::DataModule>(
      "gaussian_blobs", "Points around one Gaussian center per class (plugin example)",
      kiln::OptionSchema()
          .Int("num_classes", 4, "number of classes (centers)")
          .Int("dims", 8, "dimensions of each point")
          .Float("spread", 1.0, "standard deviation of the points around their center")
          .Int("train_size", 4000, "training points")
          .Int("val_size", 500, "validation points")
          .Int("test_size", 1000, "test points")
          .Int("seed", 0, "seed of the centers and points")
          .Int("batch_size", 64, "examples per batch")
          .Int("num_workers", 1, "loader threads"),
      Build);
}

}  // namespace

KILN_PLUGIN("gaussian_blobs", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
