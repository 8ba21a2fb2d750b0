// An image folder (torchvision's ImageFolder): root/CLASS/.../IMAGE, the class index being the
// position of CLASS among the sorted folder names. Images (jpg, png, bmp, webp) are decoded with
// OpenCV when a sample is loaded, optionally resized, as RGB or grayscale uint8 [C, H, W].
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/common/option_values.h"
#include "components/vision/image_data_module.h"
#include "components/vision/image_ops.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadImageFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open image file"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct ImageFile {
  std::string path;
  int64_t label = -1;  // -1: not in a class folder (prediction inputs)
};

class ImageFileDataset : public Dataset {
 public:
  ImageFileDataset(std::shared_ptr<const std::vector<ImageFile>> files, ImageDecodeOptions decode,
                   TransformPipeline transforms)
      : files_(std::move(files)), decode_(decode), transforms_(std::move(transforms)) {}
  int64_t size() const override { return static_cast<int64_t>(files_->size()); }
  std::string Source(int64_t index) const override {
    return (*files_)[static_cast<size_t>(index)].path;
  }
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override {
    const ImageFile& file = (*files_)[static_cast<size_t>(index)];
    KILN_ASSIGN_OR_RETURN(std::string bytes, ReadImageFile(file.path));
    KILN_ASSIGN_OR_RETURN(torch::Tensor image,
                          DecodeAndTransform(bytes, decode_, transforms_, rng, file.path));
    return Example{image, torch::tensor(file.label, torch::kInt64)};
  }
  // The file as it is (KEY.jpg keeps its encoding) and its label.
  absl::StatusOr<EncodedSample> Encoded(int64_t index) const override {
    const ImageFile& file = (*files_)[static_cast<size_t>(index)];
    KILN_ASSIGN_OR_RETURN(std::string bytes, ReadImageFile(file.path));
    std::string ext = absl::AsciiStrToLower(fs::path(file.path).extension().string().substr(1));
    if (ext == "jpeg") ext = "jpg";
    EncodedSample files{{ext, std::move(bytes)}};
    if (file.label >= 0)
      files.emplace_back("cls", std::to_string(file.label));  // prediction inputs: none
    return files;
  }

 private:
  std::shared_ptr<const std::vector<ImageFile>> files_;
  ImageDecodeOptions decode_;
  TransformPipeline transforms_;
};

bool IsImageFile(const fs::path& path) {
  std::string ext = absl::AsciiStrToLower(path.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp" || ext == ".webp";
}

// Image files below `dir` (following sub-folders), sorted by path.
absl::StatusOr<std::vector<std::string>> ImagesBelow(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code error;
  for (fs::recursive_directory_iterator
           it(dir, fs::directory_options::follow_directory_symlink, error),
       end;
       !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error) && IsImageFile(it->path())) out.push_back(it->path().string());
  }
  if (error)
    return absl::NotFoundError(absl::StrCat(dir.string(), ": cannot list: ", error.message()));
  std::sort(out.begin(), out.end());
  return out;
}

// The sorted names of the sub-folders of `root`.
absl::StatusOr<std::vector<std::string>> ClassFolders(const std::string& root) {
  std::error_code error;
  if (!fs::is_directory(root, error))
    return absl::NotFoundError(absl::StrCat(root, ": no such folder"));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  if (error) return absl::NotFoundError(absl::StrCat(root, ": cannot list: ", error.message()));
  std::sort(names.begin(), names.end());
  return names;
}

// Where an image folder's images are and how they are decoded.
struct ImageFolderLayout {
  std::string root, test_root;
  std::vector<std::string> classes;  // empty: the sorted sub-folders of root
  ImageDecodeOptions decode;
};

class ImageFolder : public ImageDataModule {
 public:
  ImageFolder(ImageFolderLayout layout, ImageDataSetup setup)
      : ImageDataModule(std::move(setup)), options_(std::move(layout)) {}

  absl::Status PrepareData() override {
    if (!options_.classes.empty()) {
      set_class_names(options_.classes);
      return absl::OkStatus();
    }
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> folders, ClassFolders(options_.root));
    set_class_names(std::move(folders));
    return absl::OkStatus();
  }

 protected:
  ImageDecodeOptions RawImageDecode() const override { return options_.decode; }
  absl::StatusOr<DatasetMaker> LoadTraining() override { return Labelled(options_.root); }
  absl::StatusOr<DatasetMaker> LoadTest() override {
    if (options_.test_root.empty()) return DatasetMaker();
    return Labelled(options_.test_root);
  }
  // Every image below root: those in a class folder carry its label, the others -1.
  absl::StatusOr<DatasetMaker> LoadPredict() override {
    std::error_code error;
    if (!fs::is_directory(options_.root, error))
      return absl::NotFoundError(absl::StrCat(options_.root, ": no such folder"));
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> paths, ImagesBelow(options_.root));
    if (paths.empty())
      return absl::NotFoundError(absl::StrCat(options_.root, ": no images (jpg, png, bmp, webp)"));
    const std::vector<std::string> names = class_names();
    auto files = std::make_shared<std::vector<ImageFile>>();
    for (auto& path : paths) {
      fs::path relative = fs::path(path).lexically_relative(options_.root);
      int64_t label = -1;
      if (std::distance(relative.begin(), relative.end()) > 1) {
        auto it = std::find(names.begin(), names.end(), relative.begin()->string());
        if (it != names.end()) label = it - names.begin();
      }
      files->push_back({std::move(path), label});
    }
    return Maker(std::move(files));
  }

 private:
  absl::StatusOr<DatasetMaker> Labelled(const std::string& root) {
    const std::vector<std::string> names = class_names();
    if (names.empty())
      return absl::NotFoundError(
          absl::StrCat(root, ": no class folders (expected ROOT/CLASS/IMAGE)"));
    auto files = std::make_shared<std::vector<ImageFile>>();
    for (size_t c = 0; c < names.size(); ++c) {
      fs::path dir = fs::path(root) / names[c];
      std::error_code error;
      if (!fs::is_directory(dir, error))
        return absl::NotFoundError(absl::StrCat(dir.string(), ": no such class folder"));
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> paths, ImagesBelow(dir));
      if (paths.empty())
        return absl::NotFoundError(absl::StrCat(dir.string(), ": no images (jpg, png, bmp, webp)"));
      for (auto& path : paths) files->push_back({std::move(path), static_cast<int64_t>(c)});
    }
    return Maker(std::move(files));
  }

  DatasetMaker Maker(std::shared_ptr<const std::vector<ImageFile>> files) const {
    ImageDecodeOptions decode = options_.decode;
    DatasetMaker maker;
    maker.make = [files,
                  decode](const TransformPipeline& transforms) -> std::shared_ptr<const Dataset> {
      return std::make_shared<ImageFileDataset>(files, decode, transforms);
    };
    for (const auto& file : *files) maker.labels.push_back(file.label);
    return maker;
  }

  ImageFolderLayout options_;
};

struct ImageFolderOptions : ImageDataOptions {
  std::string root;
  std::optional<std::string> test_root;
  std::optional<std::vector<std::string>> classes;
  std::optional<ImageSize> size;
  bool grayscale = false;
};

KILN_REGISTER_BOUND(
    DataModule, "image_folder",
    "Images in one folder per class (torchvision ImageFolder), decoded with OpenCV",
    AddImageDataOptions(
        OptionBinding<ImageFolderOptions>()
            .Required("root", &ImageFolderOptions::root,
                      "folder of class folders (ROOT/CLASS/IMAGE); train and val are split from it")
            .Field("test_root", &ImageFolderOptions::test_root,
                   "folder of the same class folders for the test split (null: no test split)")
            .Field("classes", &ImageFolderOptions::classes,
                   "class folders to use, in index order (a subset keeps only those; null: the "
                   "sorted sub-folders of root)")
            .Field("size", &ImageFolderOptions::size,
                   "resize every image to [height, width] (or a side for squares) when decoding; "
                   "null keeps sizes (then they must all match to be batched)")
            .Field("grayscale", &ImageFolderOptions::grayscale,
                   "decode as one grayscale channel instead of RGB")),
    [](const ImageFolderOptions& o) -> absl::StatusOr<std::shared_ptr<DataModule>> {
      KILN_ASSIGN_OR_RETURN(ImageDataSetup setup, ImageDataSetup::From(o));
      ImageSize size = o.size.value_or(ImageSize{});  // 0 x 0: keep each image's size
      ImageFolderLayout layout{o.root, o.test_root.value_or(""),
                               o.classes.value_or(std::vector<std::string>{}),
                               ImageDecodeOptions{o.grayscale, size.height, size.width}};
      return std::make_shared<ImageFolder>(std::move(layout), std::move(setup));
    });

}  // namespace
}  // namespace kiln::data
