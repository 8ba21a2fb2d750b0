// A kiln plugin that adds a data module: points drawn around one Gaussian center per class,
// a classification problem an MLP learns in seconds. Centers and points come from `seed`,
// so every run sees the same data.
//   kiln train --plugin PATH/libgaussian_blobs.so experiment=blobs
#include <kiln/data.h>
#include <kiln/plugin.h>
#include <kiln/registry.h>

namespace {

using kiln::data::Dataset;
using kiln::data::Example;
using kiln::data::SampleRng;
using kiln::data::Stage;

class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor points, torch::Tensor labels)
      : points_(std::move(points)), labels_(std::move(labels)) {}
  int64_t size() const override { return points_.size(0); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng&) const override {
    return Example{points_[index], labels_[index]};
  }

 private:
  torch::Tensor points_, labels_;
};

// The options, each declared once in Register() (name, doc, check) with its default here.
struct BlobOptions {
  int64_t num_classes = 4;
  int64_t dims = 8;
  double spread = 1.0;
  int64_t train_size = 4000;
  int64_t val_size = 500;
  int64_t test_size = 1000;
  int64_t seed = 0;
  int64_t batch_size = 64;
  int num_workers = 1;
};

class GaussianBlobs : public kiln::data::DataModule {
 public:
  explicit GaussianBlobs(BlobOptions o) : o_(o) {}

  absl::Status Setup(Stage) override {
    if (train_) return absl::OkStatus();
    torch::Generator gen =
        torch::make_generator<torch::CPUGeneratorImpl>(static_cast<uint64_t>(o_.seed));
    torch::Tensor centers = torch::randn({o_.num_classes, o_.dims}, gen) * 3.0;
    auto draw = [&](int64_t n) {
      torch::Tensor labels = torch::randint(o_.num_classes, {n}, gen, torch::kLong);
      torch::Tensor points =
          centers.index_select(0, labels) + torch::randn({n, o_.dims}, gen) * o_.spread;
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
  kiln::data::LoaderOptions loader_options() const override {
    kiln::data::LoaderOptions loader;
    loader.batch_size = o_.batch_size;
    loader.num_workers = o_.num_workers;
    return loader;
  }

 private:
  BlobOptions o_;
  std::shared_ptr<Dataset> train_, val_, test_;
};

void Register(kiln::Registrar& registrar) {
  using O = BlobOptions;
  registrar.Add<kiln::data::DataModule>(
      "gaussian_blobs", "Points around one Gaussian center per class (plugin example)",
      kiln::OptionBinding<O>()
          .Field("num_classes", &O::num_classes, "number of classes (centers)", kiln::AtLeast(1))
          .Field("dims", &O::dims, "dimensions of each point", kiln::AtLeast(1))
          .Field("spread", &O::spread, "standard deviation of the points around their center",
                 kiln::AtLeast(0))
          .Field("train_size", &O::train_size, "training points", kiln::AtLeast(1))
          .Field("val_size", &O::val_size, "validation points", kiln::AtLeast(1))
          .Field("test_size", &O::test_size, "test points", kiln::AtLeast(1))
          .Field("seed", &O::seed, "seed of the centers and points")
          .Field("batch_size", &O::batch_size, "examples per batch", kiln::AtLeast(1))
          .Field("num_workers", &O::num_workers, "loader threads (0: on the training thread)",
                 kiln::AtLeast(0)),
      [](const O& o) -> absl::StatusOr<std::shared_ptr<kiln::data::DataModule>> {
        return std::make_shared<GaussianBlobs>(o);
      });
}

}  // namespace

KILN_PLUGIN("gaussian_blobs", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
