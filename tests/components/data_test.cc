// Data modules on files the tests write: image folders (png, jpg, bmp, webp through OpenCV) and
// CIFAR binary batches. Pixels, labels, class names and splits are checked exactly; broken
// inputs give errors that name the file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/data/datamodule.h"
#include "lib/data/loader.h"
#include "lib/registry/registry.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln::data {
namespace data_test {

absl::StatusOr<std::shared_ptr<DataModule>> Build(const std::string& yaml) {
  return testing::Instantiate<DataModule>(yaml, "data");
}

std::shared_ptr<DataModule> BuildOk(const std::string& yaml) {
  return testing::InstantiateOk<DataModule>(yaml, "data");
}

Example GetOk(const Dataset& ds, int64_t i) {
  SampleRng rng(0, 0, i);
  auto e = ds.Get(i, rng);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : Example{};
}

// A 4x5 BGR image whose pixel (y, x) is (b, g, r) = (10 * y + x, 100 + seed, 200 + seed).
cv::Mat Pattern(int seed) {
  cv::Mat m(4, 5, CV_8UC3);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 5; ++x)
      m.at<cv::Vec3b>(y, x) = cv::Vec3b(10 * y + x, 100 + seed, 200 + seed);
  }
  return m;
}

void WriteImage(const std::string& path, const cv::Mat& image) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::vector<uchar> bytes;
  std::string ext = std::filesystem::path(path).extension().string();
  std::vector<int> params;
  if (ext == ".webp") params = {cv::IMWRITE_WEBP_QUALITY, 101};  // above 100: lossless
  ASSERT_TRUE(cv::imencode(ext, image, bytes, params)) << path;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/images";
    // Lossless formats, so pixels can be compared exactly; class folders out of order on purpose.
    WriteImage(root_ + "/dog/a.png", Pattern(1));
    WriteImage(root_ + "/dog/nested/b.bmp", Pattern(2));
    WriteImage(root_ + "/cat/c.PNG", Pattern(3));
    WriteImage(root_ + "/cat/d.webp", Pattern(4));
    WriteImage(root_ + "/ant/e.png", Pattern(5));
    WriteImage(root_ + "/ant/f.jpg", Pattern(6));
    dir_.Write("images/ant/notes.txt", "not an image");
  }
  std::string Yaml(const std::string& extra = "") {
    return "_target_: image_folder\nroot: " + root_ + "\nval_fraction: 0\nnum_workers: 0\n" + extra;
  }

  testing::TempDir dir_;
  std::string root_;
};

TEST_F(ImageFolderTest, ClassesAreSortedFoldersAndPixelsAreRgb) {
  auto dm = BuildOk(Yaml());
  ASSERT_TRUE(dm->PrepareData().ok());
  EXPECT_EQ(dm->class_names(), (std::vector<std::string>{"ant", "cat", "dog"}));
  ASSERT_TRUE(dm->Setup(Stage::kPredict).ok());
  auto ds = dm->predict_dataset();
  ASSERT_EQ(ds->size(), 6);  // notes.txt is not an image
  std::vector<std::string> expected = {"ant/e.png",  "ant/f.jpg", "cat/c.PNG",
                                       "cat/d.webp", "dog/a.png", "dog/nested/b.bmp"};
  std::vector<int64_t> labels = {0, 0, 1, 1, 2, 2};
  std::vector<int> seeds = {5, 6, 3, 4, 1, 2};
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(ds->Source(i), root_ + "/" + expected[static_cast<size_t>(i)]);
    Example e = GetOk(*ds, i);
    EXPECT_EQ(e.target.item<int64_t>(), labels[static_cast<size_t>(i)]);
    ASSERT_EQ(e.input.sizes(), (std::vector<int64_t>{3, 4, 5}));
    if (expected[static_cast<size_t>(i)].find(".jpg") != std::string::npos) continue;  // lossy
    // Channel 0 is red: the BGR Mat's third value, scaled to [0, 1].
    int seed = seeds[static_cast<size_t>(i)];
    EXPECT_FLOAT_EQ(e.input[0][2][3].item<float>(), (200.0f + seed) / 255.0f)
        << expected[static_cast<size_t>(i)];
    EXPECT_FLOAT_EQ(e.input[1][2][3].item<float>(), (100.0f + seed) / 255.0f);
    EXPECT_FLOAT_EQ(e.input[2][2][3].item<float>(), 23.0f / 255.0f);
  }
}

TEST_F(ImageFolderTest, ResizeGrayscaleAndTransforms) {
  auto dm = BuildOk(
      Yaml("size: [8, 10]\ngrayscale: true\ntransforms:\n  eval: [{_target_: to_tensor}]\n"));
  ASSERT_TRUE(dm->PrepareData().ok());
  ASSERT_TRUE(dm->Setup(Stage::kPredict).ok());
  Example e = GetOk(*dm->predict_dataset(), 0);
  EXPECT_EQ(e.input.sizes(), (std::vector<int64_t>{1, 8, 10}));
  // The pattern's top-left pixel (b, g, r) = (0, 105, 205): luma 0.299 r + 0.587 g + 0.114 b.
  EXPECT_NEAR(e.input[0][0][0].item<float>() * 255, 0.299 * 205 + 0.587 * 105, 1.0);
  auto square = BuildOk(Yaml("size: 6\n"));
  ASSERT_TRUE(square->PrepareData().ok());
  ASSERT_TRUE(square->Setup(Stage::kPredict).ok());
  EXPECT_EQ(GetOk(*square->predict_dataset(), 0).input.sizes(), (std::vector<int64_t>{3, 6, 6}));
}

TEST_F(ImageFolderTest, SplitIsSeededDisjointAndComplete) {
  auto sources = [&](int seed) {
    auto dm = BuildOk("_target_: image_folder\nroot: " + root_ +
                      "\nval_fraction: 0.5\nsplit_seed: " + std::to_string(seed) + "\n");
    EXPECT_TRUE(dm->PrepareData().ok());
    EXPECT_TRUE(dm->Setup(Stage::kFit).ok());
    std::vector<std::string> train, val;
    for (int64_t i = 0; i < dm->train_dataset()->size(); ++i)
      train.push_back(dm->train_dataset()->Source(i));
    for (int64_t i = 0; i < dm->val_dataset()->size(); ++i)
      val.push_back(dm->val_dataset()->Source(i));
    return std::make_pair(train, val);
  };
  auto [train, val] = sources(1);
  EXPECT_EQ(train.size(), 3u);
  EXPECT_EQ(val.size(), 3u);
  std::set<std::string> all(train.begin(), train.end());
  all.insert(val.begin(), val.end());
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(sources(1), sources(1));
  bool differs = false;
  for (int seed = 2; seed < 8 && !differs; ++seed) differs = sources(seed).second != val;
  EXPECT_TRUE(differs);
}

TEST_F(ImageFolderTest, TestRootAndExplicitClasses) {
  WriteImage(dir_.path() + "/test/cat/x.png", Pattern(7));
  auto dm = BuildOk(Yaml("test_root: " + dir_.path() + "/test\nclasses: [cat]\n"));
  ASSERT_TRUE(dm->PrepareData().ok());
  ASSERT_TRUE(dm->Setup(Stage::kTest).ok());
  ASSERT_EQ(dm->test_dataset()->size(), 1);
  EXPECT_EQ(GetOk(*dm->test_dataset(), 0).target.item<int64_t>(), 0);
  auto no_test = BuildOk(Yaml());
  ASSERT_TRUE(no_test->PrepareData().ok());
  ASSERT_TRUE(no_test->Setup(Stage::kTest).ok());
  EXPECT_EQ(no_test->test_dataset(), nullptr);
}

TEST_F(ImageFolderTest, CorruptImageErrorNamesTheFile) {
  dir_.Write("images/cat/broken.png", "\x89PNG\r\n\x1a\n garbage that is no image");
  auto dm = BuildOk(Yaml());
  ASSERT_TRUE(dm->PrepareData().ok());
  ASSERT_TRUE(dm->Setup(Stage::kPredict).ok());
  auto ds = dm->predict_dataset();
  ASSERT_EQ(ds->Source(2), root_ + "/cat/broken.png");
  SampleRng rng(0, 0, 2);
  auto e = ds->Get(2, rng);
  ASSERT_FALSE(e.ok());
  // libpng's own words after the file's name (kiln decodes PNGs with libpng, image_ops.cc).
  EXPECT_EQ(e.status().message().substr(0, root_.size() + 36),
            root_ + "/cat/broken.png: cannot decode PNG: ")
      << e.status();
}

TEST_F(ImageFolderTest, BadLayoutsAreNamed) {
  std::filesystem::create_directories(root_ + "/empty");
  auto dm = BuildOk(Yaml());
  ASSERT_TRUE(dm->PrepareData().ok());
  auto st = dm->Setup(Stage::kFit);
  EXPECT_EQ(st.message(), root_ + "/empty: no images (jpg, png, bmp, webp)");
  auto missing = BuildOk("_target_: image_folder\nroot: " + dir_.path() + "/nowhere\n");
  EXPECT_EQ(missing->PrepareData().message(), dir_.path() + "/nowhere: no such folder");
  auto bad_size = Build(Yaml("size: [1, 2, 3]\n"));
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(std::string(bad_size.status().message())
                .find("option 'data.size' of datamodule 'image_folder' must be [height, width]"),
            std::string::npos)
      << bad_size.status();
}

// A CIFAR record: label byte(s), then 1024 red, 1024 green and 1024 blue bytes.
std::string CifarRecord(std::vector<uint8_t> labels, uint8_t value) {
  std::string record(labels.begin(), labels.end());
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 1024; ++p) record += static_cast<char>((value + c * 50 + p) % 256);
  }
  return record;
}

class CifarTest : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& bytes) { dir_.Write(name, bytes); }
  std::string Yaml(const std::string& extra = "") {
    return "_target_: cifar\nroot: " + dir_.path() + "\nnum_workers: 0\n" + extra;
  }
  testing::TempDir dir_;
};

TEST_F(CifarTest, Cifar10RecordsBecomeChwImagesAndLabels) {
  for (int b = 1; b <= 5; ++b) {
    Write("data_batch_" + std::to_string(b) + ".bin",
          CifarRecord({uint8_t(b)}, uint8_t(b)) + CifarRecord({9}, 7));
  }
  Write("test_batch.bin", CifarRecord({3}, 11) + CifarRecord({4}, 12) + CifarRecord({5}, 13));
  std::string names;
  for (auto n :
       {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}) {
    names += std::string(n) + "\n";
  }
  Write("batches.meta.txt", names + "\n");
  auto dm = BuildOk(Yaml("val_fraction: 0.2\n"));
  ASSERT_TRUE(dm->PrepareData().ok());
  EXPECT_EQ(dm->class_names().at(9), "truck");
  ASSERT_TRUE(dm->Setup(Stage::kFit).ok());
  EXPECT_EQ(dm->train_dataset()->size(), 8);
  EXPECT_EQ(dm->val_dataset()->size(), 2);
  ASSERT_TRUE(dm->Setup(Stage::kTest).ok());
  auto test = dm->test_dataset();
  ASSERT_EQ(test->size(), 3);
  Example e = GetOk(*test, 1);
  EXPECT_EQ(e.target.item<int64_t>(), 4);
  ASSERT_EQ(e.input.sizes(), (std::vector<int64_t>{3, 32, 32}));
  // Pixel (y, x) of channel c is byte c * 1024 + y * 32 + x of the image part.
  EXPECT_FLOAT_EQ(e.input[0][0][0].item<float>() * 255, 12);
  EXPECT_FLOAT_EQ(e.input[1][2][3].item<float>() * 255, (12 + 50 + 67) % 256);
  EXPECT_FLOAT_EQ(e.input[2][31][31].item<float>() * 255, (12 + 100 + 1023) % 256);
}

TEST_F(CifarTest, Cifar100FineAndCoarseLabels) {
  Write("train.bin", CifarRecord({2, 71}, 0) + CifarRecord({19, 99}, 1));
  Write("test.bin", CifarRecord({5, 42}, 2));
  for (auto [label, expected] : {std::pair<std::string, int64_t>{"fine", 99}, {"coarse", 19}}) {
    auto dm = BuildOk(Yaml("variant: cifar100\nlabel: " + label + "\nval_fraction: 0\n"));
    ASSERT_TRUE(dm->Setup(Stage::kFit).ok());
    std::set<int64_t> labels;
    for (int64_t i = 0; i < 2; ++i)
      labels.insert(GetOk(*dm->train_dataset(), i).target.item<int64_t>());
    EXPECT_EQ(labels.count(expected), 1u) << label;
  }
}

TEST_F(CifarTest, TruncatedOrWrongFilesAreNamed) {
  for (int b = 1; b <= 5; ++b)
    Write("data_batch_" + std::to_string(b) + ".bin", CifarRecord({1}, 0));
  Write("data_batch_3.bin", CifarRecord({1}, 0).substr(0, 3000));
  auto dm = BuildOk(Yaml());
  auto st = dm->Setup(Stage::kFit);
  EXPECT_EQ(st.message(),
            dir_.path() +
                "/data_batch_3.bin: truncated or not a CIFAR file: 3000 bytes is not a whole "
                "number of 3073-byte records");
  Write("data_batch_3.bin", CifarRecord({12}, 0));
  st = dm->Setup(Stage::kFit);
  EXPECT_NE(
      st.message().find("data_batch_3.bin: record 0 has label 12, but 10 classes are expected"),
      std::string::npos)
      << st;
  st = dm->Setup(Stage::kTest);
  EXPECT_EQ(st.message(), dir_.path() + "/test_batch.bin: no such file");
  auto bad = Build(Yaml("variant: cifar1000\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      std::string(bad.status().message())
          .find("option 'data.variant' of datamodule 'cifar' must be one of: cifar10, cifar100"),
      std::string::npos);
}

}  // namespace data_test
}  // namespace kiln::data

namespace kiln::data {
namespace data_test {

// Five batches of one record per class (the record's pixels tell which), and a test batch of one
// record per class.
class ClassSubsetTest : public CifarTest {
 protected:
  void SetUp() override {
    for (int b = 1; b <= 5; ++b) {
      std::string batch;
      for (uint8_t label = 0; label < 10; ++label)
        batch += CifarRecord({label}, static_cast<uint8_t>(b * 10 + label));
      Write("data_batch_" + std::to_string(b) + ".bin", batch);
    }
    std::string test, names;
    for (uint8_t label = 0; label < 10; ++label) {
      test += CifarRecord({label}, label);
      names += "class" + std::to_string(label) + "\n";
    }
    Write("test_batch.bin", test);
    Write("batches.meta.txt", names);
  }
  // The labels and first pixels (which record) of a split.
  static std::vector<std::pair<int64_t, int>> Contents(const Dataset& ds) {
    std::vector<std::pair<int64_t, int>> out;
    for (int64_t i = 0; i < ds.size(); ++i) {
      Example e = GetOk(ds, i);
      out.emplace_back(e.target.item<int64_t>(),
                       static_cast<int>(std::lround(e.input[0][0][0].item<float>() * 255)));
    }
    return out;
  }
};

TEST_F(ClassSubsetTest, ClassesAreKeptRelabelledAndNamedInOrder) {
  auto dm = BuildOk(Yaml("val_fraction: 0.2\nclasses: [7, 3]\n"));
  ASSERT_TRUE(dm->PrepareData().ok());
  ASSERT_TRUE(dm->Setup(Stage::kFit).ok());
  EXPECT_EQ(dm->class_names(), (std::vector<std::string>{"class7", "class3"}));
  auto train = Contents(*dm->train_dataset());
  auto val = Contents(*dm->val_dataset());
  EXPECT_EQ(train.size() + val.size(), 10u);  // 5 records of each kept class
  for (const auto& [label, value] : train) EXPECT_EQ(value % 10, label == 0 ? 7 : 3) << label;
  ASSERT_TRUE(dm->Setup(Stage::kTest).ok());
  EXPECT_EQ(Contents(*dm->test_dataset()), (std::vector<std::pair<int64_t, int>>{{1, 3}, {0, 7}}));
}

TEST_F(ClassSubsetTest, SamplesPerClassIsASeededDrawFromTheTrainingSplit) {
  auto draw = [&](int seed) {
    auto dm = BuildOk(Yaml(absl::StrCat(
        "val_fraction: 0.2\nclasses: [7, 3]\nsamples_per_class: 2\nsamples_seed: ", seed, "\n")));
    EXPECT_TRUE(dm->Setup(Stage::kFit).ok());
    return std::make_pair(Contents(*dm->train_dataset()), dm->val_dataset()->size());
  };
  auto [first, val_size] = draw(1);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(std::count_if(first.begin(), first.end(), [](auto& p) { return p.first == 0; }), 2);
  EXPECT_EQ(draw(1).first, first);  // the same seed draws the same samples
  bool differs = false;
  for (int seed = 2; seed < 8; ++seed) differs = differs || draw(seed).first != first;
  EXPECT_TRUE(differs);
  // Validation keeps every sample of the kept classes.
  auto all = BuildOk(Yaml("val_fraction: 0.2\nclasses: [7, 3]\n"));
  ASSERT_TRUE(all->Setup(Stage::kFit).ok());
  EXPECT_EQ(val_size, all->val_dataset()->size());
}

// Deterministic transforms are applied once at setup (precompute_mb) and batches gathered with
// one index_select: the batches are bitwise those of per-sample Get + Collate, epoch after epoch.
TEST_F(ClassSubsetTest, PrecomputedSplitsGiveTheSameBatchesBitwise) {
  const std::string transforms =
      "transforms:\n"
      "  train: [{_target_: to_tensor}, {_target_: normalize, mean: [0.49, 0.48, 0.45], std: "
      "[0.25, 0.24, 0.26]}]\n"
      "  eval: [{_target_: to_tensor}, {_target_: center_crop, size: 30}]\n";
  auto batches = [&](const std::string& extra, bool expect_stacked) {
    auto dm = BuildOk(Yaml("val_fraction: 0.2\n" + transforms + extra));
    EXPECT_TRUE(dm->Setup(Stage::kFit).ok());
    std::vector<Batch> out;
    for (const auto& ds : {dm->train_dataset(), dm->val_dataset()}) {
      EXPECT_EQ(ds->GetStacked({0, 1}).has_value(), expect_stacked);
      LoaderOptions options = dm->loader_options();
      options.batch_size = 3;
      options.seed = 5;
      DataLoader loader(ds, RandomSampler(ds->size(), 11), options);
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        EXPECT_TRUE(loader
                        .Run(epoch, 0, loader.num_batches(),
                             [&](Batch& b) -> absl::StatusOr<bool> {
                               out.push_back(b);
                               return true;
                             })
                        .ok());
      }
    }
    return out;
  };
  for (const std::string classes : {"", "classes: [7, 3, 0]\n"}) {
    std::vector<Batch> cached = batches(classes, true);
    std::vector<Batch> plain = batches(classes + "precompute_mb: 0\n", false);
    ASSERT_EQ(cached.size(), plain.size());
    ASSERT_GT(cached.size(), 4u);
    for (size_t i = 0; i < cached.size(); ++i) {
      EXPECT_EQ(cached[i].input.scalar_type(), plain[i].input.scalar_type());
      EXPECT_EQ(cached[i].target.scalar_type(), plain[i].target.scalar_type());
      EXPECT_TRUE(torch::equal(cached[i].input, plain[i].input)) << classes << " batch " << i;
      EXPECT_TRUE(torch::equal(cached[i].target, plain[i].target)) << classes << " batch " << i;
    }
  }
  // A random transform keeps the per-sample path.
  auto random =
      BuildOk(Yaml("transforms:\n  train: [{_target_: to_tensor}, {_target_: horizontal_flip}]\n"));
  ASSERT_TRUE(random->Setup(Stage::kFit).ok());
  EXPECT_FALSE(random->train_dataset()->GetStacked({0}).has_value());
  EXPECT_TRUE(
      random->val_dataset()->GetStacked({0}).has_value());  // no eval transforms: to float only
}

TEST_F(ClassSubsetTest, BadSubsetsAreNamed) {
  auto twice = Build(Yaml("classes: [3, 3]\n"));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(std::string(twice.status().message())
                .find("option 'data.classes' of datamodule 'cifar' must be distinct labels"),
            std::string::npos)
      << twice.status();
  auto absent = BuildOk(Yaml("val_fraction: 0\nclasses: [3, 12]\n"));
  EXPECT_EQ(std::string(absent->Setup(Stage::kFit).message()),
            "data.classes: no training sample has label 12");
  auto few = BuildOk(Yaml("val_fraction: 0\nclasses: [3]\nsamples_per_class: 6\n"));
  EXPECT_EQ(std::string(few->Setup(Stage::kFit).message()),
            "data.samples_per_class=6 but class 3 has only 5 training samples");
}

// batch_size, num_workers and prefetch are declared once (lib/data/batching_options.h): every data
// module refuses the same bad values with the same message, before it reads any file.
TEST(BatchingOptions, EveryDataModuleChecksThemAlike) {
  const std::vector<std::pair<std::string, int>> bad = {
      {"batch_size", 0}, {"num_workers", -1}, {"prefetch", 0}};
  int modules = 0;
  for (const auto& name : RegistryHub::Instance().Names(DataModule::kKind)) {
    for (const auto& [option, value] : bad) {
      auto made = Registry<DataModule>::Get().Instantiate(name, Options().Set(option, value));
      ASSERT_FALSE(made.ok()) << name << " took " << option << "=" << value;
      EXPECT_TRUE(absl::StrContains(made.status().message(), option))
          << name << ": " << made.status();
      EXPECT_TRUE(
          absl::StrContains(made.status().message(), value == -1 ? "at least 0" : "at least 1"))
          << name << ": " << made.status();
    }
    ++modules;
  }
  EXPECT_GE(modules, 6);  // image, text and audio modules
}

}  // namespace data_test
}  // namespace kiln::data
