// CIFAR-10 and CIFAR-100 in their binary distributions (cifar-10-batches-bin, cifar-100-binary):
// fixed-size records of label byte(s) then a 32x32 RGB image stored channel by channel. The
// training files are split into train and val from a seed.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "components/vision/cifar_file.h"
#include "components/vision/image_data_module.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

struct CifarLayout {
  std::vector<std::string> train_files, test_files;
  CifarRecordLayout records;
  std::string names_file;  // class names, one a line, when the folder has it
};

class Cifar : public ImageDataModule {
 public:
  Cifar(std::string root, CifarLayout layout, ImageDataSetup setup)
      : ImageDataModule(std::move(setup)), root_(std::move(root)), layout_(std::move(layout)) {}

  absl::Status PrepareData() override {
    // Names are optional: without the metadata file, predictions name classes by index.
    std::ifstream names(root_ + "/" + layout_.names_file);
    std::string line;
    std::vector<std::string> read;
    while (std::getline(names, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) read.push_back(line);
    }
    if (static_cast<int64_t>(read.size()) == layout_.records.num_classes)
      set_class_names(std::move(read));
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<DatasetMaker> LoadTraining() override { return Load(layout_.train_files); }
  absl::StatusOr<DatasetMaker> LoadTest() override { return Load(layout_.test_files); }

 private:
  absl::StatusOr<DatasetMaker> Load(const std::vector<std::string>& files) {
    std::vector<std::string> paths;
    for (const auto& name : files) paths.push_back(root_ + "/" + name);
    KILN_ASSIGN_OR_RETURN(auto images_labels, ReadCifarBatches(paths, layout_.records));
    return InMemory(images_labels.first, images_labels.second);
  }

  std::string root_;
  CifarLayout layout_;
};

struct CifarOptions : ImageDataOptions, LabelSubsetOptions {
  std::string root;
  std::string variant = "cifar10";
  std::string label = "fine";
};

// Where the records and their class are, by variant and (cifar100) label.
CifarLayout LayoutOf(const CifarOptions& o) {
  CifarLayout layout;
  if (o.variant == "cifar10") {
    for (int i = 1; i <= 5; ++i)
      layout.train_files.push_back(absl::StrCat("data_batch_", i, ".bin"));
    layout.test_files = {"test_batch.bin"};
    layout.names_file = "batches.meta.txt";
    return layout;
  }
  layout.train_files = {"train.bin"};
  layout.test_files = {"test.bin"};
  layout.records.label_bytes = 2;
  layout.records.label_offset = o.label == "fine" ? 1 : 0;
  layout.records.num_classes = o.label == "fine" ? 100 : 20;
  layout.names_file = o.label + "_label_names.txt";
  return layout;
}

KILN_REGISTER_BOUND(
    DataModule, "cifar", "CIFAR-10 / CIFAR-100 binary batches (data_batch_N.bin, train.bin, ...)",
    AddLabelSubsetOption(AddImageDataOptions(
        OptionBinding<CifarOptions>()
            .Required("root", &CifarOptions::root,
                      "folder holding the .bin files (cifar-10-batches-bin or cifar-100-binary)")
            .Field("variant", &CifarOptions::variant,
                   "cifar10 (10 classes) or cifar100 (100 fine / 20 coarse)",
                   OneOf({"cifar10", "cifar100"}))
            .Field("label", &CifarOptions::label,
                   "cifar100 only: fine (100 classes) or coarse (20 superclasses)",
                   OneOf({"fine", "coarse"})))),
    [](const CifarOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<DataModule>> {
      KILN_ASSIGN_OR_RETURN(ImageDataSetup setup, ImageDataSetup::From(o, o, context));
      return std::make_shared<Cifar>(o.root, LayoutOf(o), std::move(setup));
    });

}  // namespace
}  // namespace kiln::data
