// MNIST-style IDX files (gzip-compressed or raw): Fashion-MNIST from Debian's
// dataset-fashion-mnist, MNIST, KMNIST. The training file is split into train and val from a seed.
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "components/vision/idx_file.h"
#include "components/vision/image_data_module.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

struct IdxFiles {
  std::string root, train_images, train_labels, test_images, test_labels;
  std::vector<std::string> class_names;  // empty: the labels themselves
  std::string class_names_key;           // "data.class_names", for messages
};

class IdxImages : public ImageDataModule {
 public:
  IdxImages(IdxFiles files, ImageDataSetup setup)
      : ImageDataModule(std::move(setup)), files_(std::move(files)) {
    set_class_names(files_.class_names);
  }

 protected:
  absl::StatusOr<DatasetMaker> LoadTraining() override {
    return Load(files_.train_images, files_.train_labels);
  }
  absl::StatusOr<DatasetMaker> LoadTest() override {
    return Load(files_.test_images, files_.test_labels);
  }
  // IDX images are single-channel.
  ImageDecodeOptions RawImageDecode() const override { return {/*grayscale=*/true, 0, 0}; }

 private:
  absl::StatusOr<DatasetMaker> Load(const std::string& images_file,
                                    const std::string& labels_file) {
    std::string images_path = files_.root + "/" + images_file;
    std::string labels_path = files_.root + "/" + labels_file;
    KILN_ASSIGN_OR_RETURN(torch::Tensor images, ReadIdx(images_path, 3));
    KILN_ASSIGN_OR_RETURN(torch::Tensor labels, ReadIdx(labels_path, 1));
    if (images.size(0) != labels.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(images_path, " has ", images.size(0),
                                                     " images but ", labels_path, " has ",
                                                     labels.size(0), " labels"));
    }
    if (!files_.class_names.empty() && labels.numel() > 0) {
      int64_t top = labels.max().item<int64_t>();
      if (top >= static_cast<int64_t>(files_.class_names.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            files_.class_names_key, ": ", files_.class_names.size(), " names, but ", labels_path,
            " has label ", top, " (one name per label 0..", top, " needed)"));
      }
    }
    return InMemory(images.unsqueeze(1), labels.to(torch::kInt64));
  }

  IdxFiles files_;
};

struct IdxImagesOptions : ImageDataOptions, LabelSubsetOptions {
  std::string root;
  std::string train_images = "train-images-idx3-ubyte.gz";
  std::string train_labels = "train-labels-idx1-ubyte.gz";
  std::string test_images = "t10k-images-idx3-ubyte.gz";
  std::string test_labels = "t10k-labels-idx1-ubyte.gz";
  std::optional<std::vector<std::string>> class_names;
};

KILN_REGISTER_BOUND(
    DataModule, "idx_images", "Images and labels in IDX files (MNIST, Fashion-MNIST), gzip or raw",
    AddLabelSubsetOption(AddImageDataOptions(
        OptionBinding<IdxImagesOptions>()
            .Required("root", &IdxImagesOptions::root, "folder holding the four IDX files")
            .Field("train_images", &IdxImagesOptions::train_images, "training images file")
            .Field("train_labels", &IdxImagesOptions::train_labels, "training labels file")
            .Field("test_images", &IdxImagesOptions::test_images, "test images file")
            .Field("test_labels", &IdxImagesOptions::test_labels, "test labels file")
            .Field("class_names", &IdxImagesOptions::class_names,
                   "the name of each label 0..n-1, for test reports and predictions (null: the "
                   "labels)"))),
    [](const IdxImagesOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<DataModule>> {
      KILN_ASSIGN_OR_RETURN(ImageDataSetup setup, ImageDataSetup::From(o, o, context));
      std::vector<std::string> names = o.class_names.value_or(std::vector<std::string>{});
      std::set<std::string> seen;
      for (const auto& name : names) {
        if (name.empty() || !seen.insert(name).second) {
          return context.Refuse("class_names",
                                absl::StrCat("distinct non-empty names ('", name, "' is not)"));
        }
      }
      for (int64_t label : setup.classes) {
        if (!names.empty() && label >= static_cast<int64_t>(names.size())) {
          return context.Refuse("classes",
                                absl::StrCat("labels with a name in class_names (", names.size(),
                                             " names: labels 0..", names.size() - 1, ")"));
        }
      }
      return std::make_shared<IdxImages>(
          IdxFiles{o.root, o.train_images, o.train_labels, o.test_images, o.test_labels,
                   std::move(names), context.FullKey("class_names")},
          std::move(setup));
    });

}  // namespace
}  // namespace kiln::data
