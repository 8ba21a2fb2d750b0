// Shards (lib/data/shards, data=shards): brace expansion, tar round trips, the epoch order's
// contracts (ranks disjoint with the epoch as their union, the shuffle buffer's bound, resume and
// thread count not changing batches), the JPEG crop path, and bad shards answered with one line
// naming the shard.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/audio/audio_file.h"
#include "components/text/text_data_module.h"
#include "components/vision/image_ops.h"
#include "components/vision/jpeg_crop.h"
#include "lib/data/datamodule.h"
#include "lib/data/loader.h"
#include "lib/data/shards/shard_dataset.h"
#include "lib/data/shards/shard_set.h"
#include "lib/data/shards/tar_shard.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln::data::shards {
namespace shards_test {

std::string Png(int value, int size = 8) {
  cv::Mat image(size, size, CV_8UC1, cv::Scalar(value));
  image.at<uint8_t>(0, 0) = static_cast<uint8_t>(255 - value);
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(cv::imencode(".png", image, bytes));
  return std::string(bytes.begin(), bytes.end());
}

// A textured colour JPEG (what the crop path is for).
std::string Jpeg(int height, int width, int seed) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.at<cv::Vec3b>(y, x) =
          cv::Vec3b(static_cast<uint8_t>((x * 3 + seed) % 256), static_cast<uint8_t>((y * 5) % 256),
                    static_cast<uint8_t>(((x + y) * 2 + seed * 7) % 256));
    }
  }
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(cv::imencode(".jpg", image, bytes, {cv::IMWRITE_JPEG_QUALITY, 95}));
  return std::string(bytes.begin(), bytes.end());
}

// `shards` shards of `per_shard` samples, sample n = KEY %06d with an 8x8 PNG of value n and label
// n % 3.
std::vector<std::string> WriteShards(const std::string& dir, int shards, int per_shard) {
  std::vector<std::string> paths;
  int n = 0;
  for (int s = 0; s < shards; ++s) {
    std::string path = absl::StrFormat("%s/train-%06d.tar", dir, s);
    auto writer = ShardWriter::Create(path);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (int i = 0; i < per_shard; ++i, ++n) {
      EXPECT_TRUE((*writer)
                      ->Add(absl::StrFormat("%06d", n),
                            {{"png", Png(n % 250)}, {"cls", std::to_string(n % 3)}})
                      .ok());
    }
    EXPECT_TRUE((*writer)->Close().ok());
    paths.push_back(path);
  }
  return paths;
}

TEST(Shards, BraceExpansionAsWebDataset) {
  auto a = ExpandBraces("d/train-{000..003}.tar");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (std::vector<std::string>{"d/train-000.tar", "d/train-001.tar", "d/train-002.tar",
                                          "d/train-003.tar"}));
  auto b = ExpandBraces("{x,y}-{8..10}");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<std::string>{"x-8", "x-9", "x-10", "y-8", "y-9", "y-10"}));
  EXPECT_FALSE(ExpandBraces("a-{3..1}.tar").ok());
  EXPECT_FALSE(ExpandBraces("a-{3..").ok());
}

TEST(Shards, KeysSplitAtTheFirstDotOfTheBaseName) {
  EXPECT_EQ(SplitKeyExt("a/b.seg.JPG"), (std::pair<std::string, std::string>{"a/b", "seg.jpg"}));
  EXPECT_EQ(SplitKeyExt("x.y/0001.cls"), (std::pair<std::string, std::string>{"x.y/0001", "cls"}));
}

TEST(Shards, WritesAndReadsBackKeysAndBytesReproducibly) {
  testing::TempDir dir;
  std::vector<std::string> sums;
  for (const char* name : {"/a.tar", "/b.tar"}) {
    auto writer = ShardWriter::Create(dir.path() + name);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(
        (*writer)->Add("k0", {{"jpg", std::string("\xff\xd8\xff rest", 8)}, {"cls", "2"}}).ok());
    ASSERT_TRUE((*writer)->Add("k1", {{"txt", "hello"}, {"json", "{}"}}).ok());
    auto sum = (*writer)->Close();
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_EQ(*sum, *FileSha256(dir.path() + name));
    sums.push_back(*sum);
  }
  EXPECT_EQ(sums[0], sums[1]);  // fixed member metadata: same samples, same bytes
  EXPECT_FALSE(testing::FileExists(dir.path() + "/a.tar.tmp" + std::to_string(::getpid())));
  auto reader = ShardReader::Open(dir.path() + "/a.tar");
  ASSERT_TRUE(reader.ok());
  auto first = (*reader)->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->key, "k0");
  ASSERT_NE((*first)->Find("jpg"), nullptr);
  EXPECT_EQ(*(*first)->Find("jpg"), std::string("\xff\xd8\xff rest", 8));
  EXPECT_EQ(*(*first)->Find("cls"), "2");
  auto second = (*reader)->Next();
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->key, "k1");
  EXPECT_EQ(*(*second)->Find("txt"), "hello");
  auto end = (*reader)->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_EQ(*CountSamples(dir.path() + "/a.tar"), 2);
  // Skipping a sample leaves the next one whole (its first member's header is read ahead).
  auto again = ShardReader::Open(dir.path() + "/a.tar");
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Next(/*keep=*/false).ok());
  auto kept = (*again)->Next();
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ(*(*kept)->Find("txt"), "hello");
  EXPECT_EQ(*(*kept)->Find("json"), "{}");
  // Through a command's output too.
  EXPECT_EQ(*CountSamples("pipe:cat " + dir.path() + "/a.tar"), 2);
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Shards, RanksReadDisjointPartsWhoseUnionIsTheEpoch) {
  const std::vector<int64_t> counts = {7, 0, 5, 9, 3};  // 24 samples, an empty shard among them
  for (int64_t world : {1, 2, 3, 4}) {
    for (int64_t epoch : {0, 1}) {
      std::vector<int64_t> all;
      for (int64_t rank = 0; rank < world; ++rank) {
        ShardOrder order(counts, /*shuffle=*/true, 5, rank, world, /*buffer=*/4);
        std::vector<int64_t> deliver = order.EpochOrder(epoch);
        EXPECT_EQ(static_cast<int64_t>(deliver.size()), 24 / world);
        EXPECT_EQ(Sorted(deliver), Sorted(order.ReadOrder(epoch)));  // the buffer only reorders
        all.insert(all.end(), deliver.begin(), deliver.end());
      }
      std::vector<int64_t> expected(24);
      for (int64_t i = 0; i < 24; ++i) expected[static_cast<size_t>(i)] = i;
      EXPECT_EQ(Sorted(all), expected) << "world " << world << " epoch " << epoch;
    }
  }
  // 24 samples on 5 ranks: 5 each, one sample padded from the start of the stream (as PyTorch's
  // DistributedSampler pads).
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 5; ++rank) {
    auto deliver = ShardOrder(counts, true, 5, rank, 5, 4).EpochOrder(0);
    EXPECT_EQ(deliver.size(), 5u);
    all.insert(all.end(), deliver.begin(), deliver.end());
  }
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 24u);
}

TEST(Shards, OrderIsAPureFunctionOfSeedAndEpochAndTheBufferBoundsLookAhead) {
  const std::vector<int64_t> counts = {50, 50, 50, 50};
  ShardOrder order(counts, true, 11, 0, 1, /*buffer=*/16);
  EXPECT_EQ(order.EpochOrder(3), ShardOrder(counts, true, 11, 0, 1, 16).EpochOrder(3));
  EXPECT_NE(order.EpochOrder(0), order.EpochOrder(1));
  EXPECT_NE(order.EpochOrder(0), ShardOrder(counts, true, 12, 0, 1, 16).EpochOrder(0));
  // Each sample goes out at most `buffer` reads before it was read: bounded memory.
  std::vector<int64_t> read = order.ReadOrder(0), deliver = order.EpochOrder(0);
  std::map<int64_t, int64_t> read_at;
  for (size_t p = 0; p < read.size(); ++p) read_at[read[p]] = static_cast<int64_t>(p);
  for (size_t e = 0; e < deliver.size(); ++e)
    EXPECT_LE(read_at[deliver[e]], static_cast<int64_t>(e) + 16);
  // Unshuffled: storage order.
  std::vector<int64_t> storage = ShardOrder(counts, false, 11, 0, 1, 16).EpochOrder(7);
  for (size_t i = 0; i < storage.size(); ++i) EXPECT_EQ(storage[i], static_cast<int64_t>(i));
}

// A dataset over the shards whose example is the sample's key number (which samples a rank read).
std::shared_ptr<ShardDataset> KeyDataset(const std::string& spec, int64_t buffer = 8) {
  auto set = OpenShardSet(spec, "test");
  EXPECT_TRUE(set.ok()) << set.status();
  return std::make_shared<ShardDataset>(
      *set,
      [](const ShardSample& s, const std::string&, SampleRng& rng) -> absl::StatusOr<Example> {
        return Example{torch::tensor({static_cast<double>(rng.Uniform())}),
                       torch::tensor(static_cast<int64_t>(std::stoll(s.key)))};
      },
      buffer);
}

std::vector<Batch> Batches(const std::shared_ptr<ShardDataset>& ds, int64_t rank, int64_t world,
                           int workers, int64_t first = 0, int64_t epoch = 0) {
  LoaderOptions options;
  options.batch_size = 7;
  options.num_workers = workers;
  options.seed = 3;
  DataLoader loader(ds, SamplerFor(*ds, /*shuffle=*/true, 3, rank, world), options);
  std::vector<Batch> out;
  absl::Status status =
      loader.Run(epoch, first, loader.num_batches(), [&](Batch& b) -> absl::StatusOr<bool> {
        out.push_back(b);
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(Shards, TwoRanksStreamDisjointSamplesWhoseUnionIsTheEpoch) {
  testing::TempDir dir;
  WriteShards(dir.path(), 6, 10);  // 60 samples
  auto ds = KeyDataset(dir.path() + "/train-{000000..000005}.tar");
  std::vector<int64_t> seen;
  for (int64_t rank : {0, 1}) {
    int64_t count = 0;
    for (const auto& batch : Batches(ds, rank, 2, 2)) {
      for (int64_t i = 0; i < batch.size(); ++i) seen.push_back(batch.target[i].item<int64_t>());
      count += batch.size();
    }
    EXPECT_EQ(count, 30);
  }
  std::vector<int64_t> expected(60);
  for (int64_t i = 0; i < 60; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(Sorted(seen), expected);
}

TEST(Shards, BatchesDoNotDependOnThreadsAndAResumeSkipsExactlyTheBatchesDone) {
  testing::TempDir dir;
  WriteShards(dir.path(), 5, 9);
  auto ds = KeyDataset(dir.path() + "/train-*.tar");
  auto serial = Batches(ds, 0, 1, 0, 0, 2);
  auto threaded = Batches(ds, 0, 1, 2, 0, 2);
  auto resumed = Batches(ds, 0, 1, 2, /*first=*/3, 2);
  ASSERT_EQ(serial.size(), threaded.size());
  ASSERT_EQ(resumed.size(), serial.size() - 3);
  for (size_t b = 0; b < serial.size(); ++b) {
    EXPECT_TRUE(torch::equal(serial[b].target, threaded[b].target)) << b;
    EXPECT_TRUE(torch::equal(serial[b].input, threaded[b].input))
        << b;  // per-sample randomness too
    if (b >= 3) {
      EXPECT_TRUE(torch::equal(serial[b].target, resumed[b - 3].target)) << b;
      EXPECT_TRUE(torch::equal(serial[b].input, resumed[b - 3].input)) << b;
    }
  }
}

// Training data module over files in `dir`, with `extra` options.
absl::StatusOr<std::shared_ptr<DataModule>> ShardsModule(const std::string& spec,
                                                         const std::string& extra = "") {
  return testing::Instantiate<DataModule>(
      absl::StrCat("_target_: shards\ntrain_shards: '", spec,
                   "'\nbatch_size: 4\nnum_workers: 2\ngrayscale: true\n", extra),
      "data");
}

// The first error of one epoch of the module's training loader.
absl::Status RunEpoch(DataModule& dm, int64_t* skipped = nullptr) {
  KILN_RETURN_IF_ERROR(dm.Setup(Stage::kFit));
  auto ds = dm.train_dataset();
  DataLoader loader(ds, SamplerFor(*ds, true, 1), dm.loader_options());
  return loader.Run(0, 0, loader.num_batches(), [&](Batch& b) -> absl::StatusOr<bool> {
    if (skipped != nullptr) *skipped += b.skipped;
    return true;
  });
}

TEST(Shards, ImagesAndLabelsDecodeAsTheModuleSays) {
  testing::TempDir dir;
  WriteShards(dir.path(), 2, 6);
  auto dm = ShardsModule(dir.path() + "/train-{000000..000001}.tar", "shuffle_buffer: 1\n");
  ASSERT_TRUE(dm.ok()) << dm.status();
  ASSERT_TRUE((*dm)->Setup(Stage::kFit).ok());
  auto ds = (*dm)->train_dataset();
  EXPECT_EQ(ds->size(), 12);
  LoaderOptions options = (*dm)->loader_options();
  options.num_workers = 0;
  DataLoader loader(ds, SamplerFor(*ds, false, 0), options);
  std::vector<Batch> batches;
  ASSERT_TRUE(loader
                  .Run(0, 0, 3,
                       [&](Batch& b) -> absl::StatusOr<bool> {
                         batches.push_back(b);
                         return true;
                       })
                  .ok());
  ASSERT_EQ(batches.size(), 3u);
  // Sample 5: value 5, pixel (0, 0) 250, label 2; no transforms: float in [0, 1].
  const Batch& b = batches[1];
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{4, 1, 8, 8}));
  EXPECT_EQ(b.target[1].item<int64_t>(), 2);
  EXPECT_FLOAT_EQ(b.input[1][0][3][3].item<float>(), 5.0f / 255.0f);
  EXPECT_FLOAT_EQ(b.input[1][0][0][0].item<float>(), 250.0f / 255.0f);
  // Shards are read in order: random access says so in one line.
  SampleRng rng(0, 0, 0);
  auto direct = ds->Get(0, rng);
  ASSERT_FALSE(direct.ok());
  EXPECT_TRUE(absl::StrContains(direct.status().message(), "read in order")) << direct.status();
}

TEST(Shards, JpegCropPathKeepsTheCropBoxAndPixelsWithinRounding) {
  std::string jpeg = Jpeg(300, 400, 3);
  auto size = JpegSize(jpeg);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, (std::pair<int64_t, int64_t>{300, 400}));
  // A crop at full scale (no resize) is the crop of the full decode, up to libjpeg's chroma
  // upsampling at the crop's edges (it decodes from the edge of the iMCU rows and columns it
  // keeps).
  auto crop = DecodeJpegCrop(jpeg, {40, 64, 100, 120, 100, 120}, false, "x.jpg");
  ASSERT_TRUE(crop.ok()) << crop.status();
  auto full = DecodeImageBytes(jpeg, {}, "x.jpg");
  ASSERT_TRUE(full.ok());
  torch::Tensor expected = full->slice(1, 40, 140).slice(2, 64, 184).permute({1, 2, 0});
  torch::Tensor diff = (crop->to(torch::kInt32) - expected.to(torch::kInt32)).abs();
  EXPECT_LT(diff.to(torch::kFloat32).mean().item<float>(), 0.5f);
  // Away from the edges the pixels are the full decode's.
  EXPECT_TRUE(torch::equal(crop->slice(0, 16, 84).slice(1, 16, 104),
                           expected.slice(0, 16, 84).slice(1, 16, 104).contiguous()))
      << "max diff inside " << diff.slice(0, 16, 84).slice(1, 16, 104).max();
  // A crop scaled down while decoding (300x400 -> 64x64: 1/4) stays close to resizing the full
  // decode.
  auto small = DecodeJpegCrop(jpeg, {0, 0, 300, 400, 64, 64}, false, "x.jpg");
  ASSERT_TRUE(small.ok());
  torch::Tensor reference = ResizeBilinear(full->to(torch::kFloat32), 64, 64).permute({1, 2, 0});
  EXPECT_LT((small->to(torch::kFloat32) - reference).abs().mean().item<double>(), 6.0);
  // The folded flip + to_tensor + normalize equals the tensor transforms within float rounding.
  Transform::PixelMap map;
  map.flip = true;
  map.to_float = true;
  map.scale = {2.0f / 255.0f, 1.0f / 255.0f, 0.5f / 255.0f};
  map.shift = {-1.0f, 0.0f, 0.25f};
  torch::Tensor mapped = MapPixels(*crop, map);
  torch::Tensor chw = crop->permute({2, 0, 1}).flip({2}).to(torch::kFloat32) / 255.0;
  torch::Tensor want = chw * torch::tensor({2.0f, 1.0f, 0.5f}).view({3, 1, 1}) +
                       torch::tensor({-1.0f, 0.0f, 0.25f}).view({3, 1, 1});
  EXPECT_TRUE(torch::allclose(mapped, want, 1e-5, 1e-5));
  // Corrupt bytes after a JPEG header: one line naming the image.
  std::string broken = jpeg.substr(0, 600);
  auto bad = DecodeJpegCrop(broken + std::string(50, '\0'), {0, 0, 300, 400, 64, 64}, false,
                            "shard s.tar: sample k.jpg");
  if (!bad.ok())
    EXPECT_TRUE(absl::StrContains(bad.status().message(), "shard s.tar: sample k.jpg"))
        << bad.status();
}

TEST(Shards, BadShardsAreOneLineNamingTheShard) {
  testing::TempDir dir;
  auto paths = WriteShards(dir.path(), 2, 5);
  // A truncated shard.
  std::string whole = testing::ReadFile(paths[1]);
  std::string cut = dir.path() + "/cut-000000.tar";
  std::ofstream(cut, std::ios::binary) << whole.substr(0, 1500);
  {
    auto dm = ShardsModule(dir.path() + "/train-000000.tar");
    ASSERT_TRUE(dm.ok());
    ASSERT_TRUE(RunEpoch(**dm).ok());
    auto counted = ShardsModule(cut);
    ASSERT_TRUE(counted.ok());
    absl::Status status = RunEpoch(**counted);
    ASSERT_FALSE(status.ok());
    EXPECT_TRUE(absl::StrContains(status.message(), cut)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "truncated")) << status;
  }
  // An empty glob, a failing command.
  for (const auto& [spec, want] : std::vector<std::pair<std::string, std::string>>{
           {dir.path() + "/none-*.tar", "matches no file"},
           {"pipe:echo oops >&2; exit 3", "exited with status 3"},
           {dir.path() + "/missing.index.json", "no such index file"}}) {
    auto dm = ShardsModule(spec);
    ASSERT_TRUE(dm.ok());
    absl::Status status = RunEpoch(**dm);
    ASSERT_FALSE(status.ok()) << spec;
    EXPECT_TRUE(absl::StrContains(status.message(), want)) << status;
  }
  // An index that promises more samples than its shard holds.
  dir.Write("short.index.json",
            absl::StrCat("{\"shards\": [{\"url\": \"train-000000.tar\", \"samples\": 9}]}"));
  {
    auto dm = ShardsModule(dir.path() + "/short.index.json", "shuffle_buffer: 1\n");
    ASSERT_TRUE(dm.ok());
    absl::Status status = RunEpoch(**dm);
    ASSERT_FALSE(status.ok());
    EXPECT_TRUE(absl::StrContains(status.message(), "holds 5 samples, its index says 9")) << status;
  }
  // A sample without a label and one whose image is corrupt: fail naming shard and key, or skip and
  // count.
  std::string odd = dir.path() + "/odd-000000.tar";
  {
    auto writer = ShardWriter::Create(odd);
    ASSERT_TRUE(writer.ok());
    for (int i = 0; i < 6; ++i)
      ASSERT_TRUE((*writer)->Add(absl::StrFormat("s%d", i), {{"png", Png(i)}, {"cls", "1"}}).ok());
    ASSERT_TRUE((*writer)->Add("nolabel", {{"png", Png(9)}}).ok());
    ASSERT_TRUE(
        (*writer)
            ->Add("broken", {{"jpg", std::string("\xff\xd8\xff\xe0 not really", 15)}, {"cls", "0"}})
            .ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  {
    auto dm = ShardsModule(odd);
    ASSERT_TRUE(dm.ok());
    absl::Status status = RunEpoch(**dm);
    ASSERT_FALSE(status.ok());
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("shard ", odd, ": sample ")))
        << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "has no label (.cls)") ||
                absl::StrContains(status.message(), "broken.jpg"))
        << status;
  }
  {
    auto dm = ShardsModule(odd, "on_corrupt: skip\n");
    ASSERT_TRUE(dm.ok());
    int64_t skipped = 0;
    absl::Status status = RunEpoch(**dm, &skipped);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(skipped, 2);
  }
}

// labelled_text from shards written from its splits (what kiln shard does) is the same data set:
// the same texts and labels in the same order, so the same tokens and targets.
TEST(Shards, LabelledTextFromItsShardsIsTheSameDataSet) {
  testing::TempDir dir;
  std::string train, val;
  for (int i = 0; i < 30; ++i) {
    std::string line =
        absl::StrFormat("{\"text\": \"message %d says %s\", \"label\": \"%s\"}\n", i,
                        i % 3 ? "hello there" : "win money now", i % 3 ? "ham" : "spam");
    (i < 24 ? train : val) += line;
  }
  dir.Write("train.jsonl", train);
  dir.Write("val.jsonl", val);
  auto module = [&](const std::string& train_path, const std::string& val_path) {
    auto dm = testing::Instantiate<DataModule>(
        absl::StrCat("_target_: labelled_text\ntrain: ", train_path, "\nval: ", val_path,
                     "\nbatch_size: 4\ntokenizer: {_target_: whitespace, min_frequency: 1}\n"),
        "data");
    EXPECT_TRUE(dm.ok()) << dm.status();
    EXPECT_TRUE((*dm)->Setup(Stage::kFit).ok());
    return *dm;
  };
  auto files = module(dir.path() + "/train.jsonl", dir.path() + "/val.jsonl");
  for (const auto& [split, ds] :
       std::vector<std::pair<std::string, std::shared_ptr<const Dataset>>>{
           {"train", files->train_dataset()}, {"val", files->val_dataset()}}) {
    auto writer = ShardWriter::Create(absl::StrCat(dir.path(), "/", split, "-000000.tar"));
    ASSERT_TRUE(writer.ok());
    for (int64_t i = 0; i < ds->size(); ++i) {
      auto encoded = ds->Encoded(i);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      ASSERT_TRUE((*writer)->Add(absl::StrFormat("%09d", i), *encoded).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto sharded = module(dir.path() + "/train-000000.tar", dir.path() + "/val-{000000..000000}.tar");
  EXPECT_EQ(sharded->class_names(), files->class_names());
  for (auto [a, b] : {std::make_pair(files->train_dataset(), sharded->train_dataset()),
                      std::make_pair(files->val_dataset(), sharded->val_dataset())}) {
    ASSERT_EQ(a->size(), b->size());
    for (int64_t i = 0; i < a->size(); ++i) {
      SampleRng r1(0, 0, i), r2(0, 0, i);
      auto x = a->Get(i, r1), y = b->Get(i, r2);
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_TRUE(torch::equal(x->input, y->input)) << i;
      EXPECT_TRUE(torch::equal(x->target, y->target)) << i;
    }
  }
}

// audio_manifest from shards written from its splits: the same utterances in the same order, so
// the same features (decoded from memory instead of files) and token targets.
TEST(Shards, AudioManifestFromItsShardsGivesTheSameExamples) {
  testing::TempDir dir;
  std::string manifest;
  const char* words[] = {"yes", "no", "up", "down", "left", "right"};
  for (int i = 0; i < 6; ++i) {
    torch::Tensor t = torch::arange(0, 4000 + 300 * i, torch::kFloat32) / 16000.0;
    torch::Tensor wave = 0.3 * torch::sin(2 * M_PI * (200.0 + 50 * i) * t);
    std::filesystem::create_directories(dir.path() + "/clips");
    ASSERT_TRUE(audio::WriteWav(absl::StrCat(dir.path(), "/clips/", i, ".wav"), wave, 16000).ok());
    manifest += absl::StrFormat("{\"audio\": \"clips/%d.wav\", \"text\": \"%s\"}\n", i, words[i]);
  }
  dir.Write("train.jsonl", manifest);
  auto module = [&](const std::string& train) {
    auto dm = testing::Instantiate<DataModule>(
        absl::StrCat("_target_: audio_manifest\ntrain: '", train,
                     "'\nval_fraction: 0.0\nbatch_size: 2\n",
                     "tokenizer: {_target_: char}\nfeatures: {_target_: log_mel, n_mels: "
                     "20}\nnormalize: global\n"),
        "data");
    EXPECT_TRUE(dm.ok()) << dm.status();
    absl::Status setup = (*dm)->Setup(Stage::kFit);
    EXPECT_TRUE(setup.ok()) << setup;
    return *dm;
  };
  auto files = module(dir.path() + "/train.jsonl");
  auto train = files->train_dataset();
  {
    auto writer = ShardWriter::Create(dir.path() + "/speech-000000.tar");
    ASSERT_TRUE(writer.ok());
    for (int64_t i = 0; i < train->size(); ++i) {
      auto encoded = train->Encoded(i);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      ASSERT_EQ((*encoded)[0].first, "wav");
      ASSERT_TRUE((*writer)->Add(absl::StrFormat("%09d", i), *encoded).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto sharded = module(dir.path() + "/speech-000000.tar");
  auto from_shards = sharded->train_dataset();
  ASSERT_EQ(from_shards->size(), train->size());
  // The split permutes: match utterances by transcript and length.
  std::map<std::string, int64_t> by_text;
  for (int64_t i = 0; i < train->size(); ++i) {
    SampleRng rng(0, 0, i);
    by_text[torch::str(train->Get(i, rng)->target)] = i;
  }
  for (int64_t i = 0; i < from_shards->size(); ++i) {
    SampleRng r1(0, 0, i);
    auto y = from_shards->Get(i, r1);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(by_text.count(torch::str(y->target)), 1u);
    int64_t j = by_text[torch::str(y->target)];
    SampleRng r2(0, 0, j);
    auto x = train->Get(j, r2);
    EXPECT_TRUE(torch::equal(x->input, y->input)) << i;
  }
}

// Writes `ds`'s records (Encoded over encoded_size, what kiln shard writes) as one shard at `path`.
void WriteRecords(const Dataset& ds, const std::string& path) {
  auto writer = ShardWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int64_t i = 0; i < ds.encoded_size(); ++i) {
    auto encoded = ds.Encoded(i);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    ASSERT_TRUE((*writer)->Add(absl::StrFormat("%09d", i), *encoded).ok());
  }
  ASSERT_TRUE((*writer)->Close().ok());
}

// Every example of `a` and `b` equal, drawn with the same randomness.
void ExpectSameExamples(const Dataset& a, const Dataset& b) {
  ASSERT_EQ(a.size(), b.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    SampleRng r1(0, 0, i), r2(0, 0, i);
    auto x = a.Get(i, r1), y = b.Get(i, r2);
    ASSERT_TRUE(x.ok() && y.ok()) << i;
    EXPECT_TRUE(torch::equal(x->input, y->input)) << i;
    EXPECT_TRUE(torch::equal(x->target, y->target)) << i;
  }
}

// text_corpus writes its documents (one per file), not its overlapping blocks, and reading them
// back from shards gives the same token stream: the same blocks and bits-per-character scale.
TEST(Shards, TextCorpusFromItsShardsIsTheSameStream) {
  testing::TempDir dir;
  std::string a, b, c;
  for (int i = 0; i < 40; ++i) {
    a += absl::StrFormat("Call me Ishmael, line %d. ", i);
    b += absl::StrFormat("The whale, the sea %d; ", i * 7);
    c += absl::StrFormat("Stubb and Flask %d. ", i);
  }
  dir.Write("a.txt", a);
  dir.Write("b.txt", b);
  dir.Write("c.txt", c);
  auto module = [&](const std::string& train, const std::string& val) {
    auto dm = testing::Instantiate<DataModule>(
        absl::StrCat("_target_: text_corpus\ntrain: ", train, "\nval: ", val,
                     "\nblock_size: 16\nstride: 5\nbatch_size: 4\ntokenizer: {_target_: char}\n"),
        "data");
    EXPECT_TRUE(dm.ok()) << dm.status();
    absl::Status setup = (*dm)->Setup(Stage::kFit);
    EXPECT_TRUE(setup.ok()) << setup;
    return *dm;
  };
  auto files = module(absl::StrCat("['", dir.path(), "/a.txt', '", dir.path(), "/b.txt']"),
                      absl::StrCat("['", dir.path(), "/c.txt']"));
  ASSERT_EQ(files->train_dataset()->encoded_size(), 2);
  auto first = files->train_dataset()->Encoded(1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, (EncodedSample{{"txt", b}}));
  WriteRecords(*files->train_dataset(), dir.path() + "/train-000000.tar");
  WriteRecords(*files->val_dataset(), dir.path() + "/val-000000.tar");
  auto sharded = module(absl::StrCat("['", dir.path(), "/train-000000.tar']"),
                        absl::StrCat("['", dir.path(), "/val-{000000..000000}.tar']"));
  ExpectSameExamples(*files->train_dataset(), *sharded->train_dataset());
  ExpectSameExamples(*files->val_dataset(), *sharded->val_dataset());
  auto* text_files = dynamic_cast<text::TextDataModule*>(files.get());
  auto* text_shards = dynamic_cast<text::TextDataModule*>(sharded.get());
  ASSERT_TRUE(text_files != nullptr && text_shards != nullptr);
  EXPECT_GT(text_files->tokens_per_char("val"), 0);
  EXPECT_EQ(text_files->tokens_per_char("val"), text_shards->tokens_per_char("val"));

  // A sample without text names its shard and key.
  {
    auto writer = ShardWriter::Create(dir.path() + "/bad-000000.tar");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add("doc7", {{"md", "# no txt"}}).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto bad = testing::Instantiate<DataModule>(
      absl::StrCat("_target_: text_corpus\ntrain: ['", dir.path(),
                   "/bad-000000.tar']\ntokenizer: {_target_: char}\n"),
      "data");
  ASSERT_TRUE(bad.ok()) << bad.status();
  absl::Status status = (*bad)->Setup(Stage::kFit);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "bad-000000.tar")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "doc7 has no text (.txt)")) << status;
}

// audio_folder from shards written from its splits: the same clips and classes in the same order,
// the class names from the shards' index; a class index out of range names the shard and key.
TEST(Shards, AudioFolderFromItsShardsGivesTheSameExamples) {
  testing::TempDir dir;
  const std::vector<std::string> classes = {"go", "no", "yes"};
  for (const std::string split : {"train", "val"}) {
    for (size_t c = 0; c < classes.size(); ++c) {
      std::filesystem::create_directories(absl::StrCat(dir.path(), "/", split, "/", classes[c]));
      for (int i = 0; i < 3; ++i) {
        torch::Tensor t = torch::arange(0, 16000, torch::kFloat32) / 16000.0;
        torch::Tensor wave =
            0.2 * torch::sin(2 * M_PI * (150.0 + 100 * c + 13 * i + (split == "val" ? 5 : 0)) * t);
        ASSERT_TRUE(
            audio::WriteWav(absl::StrCat(dir.path(), "/", split, "/", classes[c], "/", i, ".wav"),
                            wave, 16000)
                .ok());
      }
    }
  }
  auto module = [&](const std::string& train, const std::string& val) {
    auto dm = testing::Instantiate<DataModule>(
        absl::StrCat("_target_: audio_folder\ntrain: '", train, "'\nval: '", val,
                     "'\nbatch_size: 2\nfeatures: {_target_: log_mel, n_mels: 20}\n",
                     "waveform_transforms: [{_target_: time_shift, max_seconds: 0.1, sample_rate: "
                     "16000}]\n"),
        "data");
    EXPECT_TRUE(dm.ok()) << dm.status();
    absl::Status setup = (*dm)->Setup(Stage::kFit);
    EXPECT_TRUE(setup.ok()) << setup;
    return *dm;
  };
  auto files = module(dir.path() + "/train", dir.path() + "/val");
  EXPECT_EQ(files->class_names(), classes);
  for (const std::string split : {"train", "val"}) {
    auto ds = split == "train" ? files->train_dataset() : files->val_dataset();
    WriteRecords(*ds, absl::StrCat(dir.path(), "/", split, "-000000.tar"));
    ShardSet set;
    set.classes = classes;
    set.shards.push_back({absl::StrCat(dir.path(), "/", split, "-000000.tar"), ds->size()});
    dir.Write(split + ".index.json", IndexJson(set, dir.path()));
  }
  auto sharded = module(dir.path() + "/train.index.json", dir.path() + "/val-000000.tar");
  EXPECT_EQ(sharded->class_names(), classes);
  ExpectSameExamples(*files->train_dataset(), *sharded->train_dataset());
  ExpectSameExamples(*files->val_dataset(), *sharded->val_dataset());

  {
    auto writer = ShardWriter::Create(dir.path() + "/odd-000000.tar");
    ASSERT_TRUE(writer.ok());
    auto clip = files->val_dataset()->Encoded(0);
    ASSERT_TRUE(clip.ok());
    ASSERT_TRUE((*writer)->Add("clip9", {{"wav", (*clip)[0].second}, {"cls", "7"}}).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto odd = testing::Instantiate<DataModule>(
      absl::StrCat("_target_: audio_folder\ntrain: '", dir.path(), "/train.index.json'\nval: '",
                   dir.path(), "/odd-000000.tar'\nfeatures: {_target_: log_mel, n_mels: 20}\n"),
      "data");
  ASSERT_TRUE(odd.ok()) << odd.status();
  absl::Status status = (*odd)->Setup(Stage::kFit);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "odd-000000.tar")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "clip9.cls: '7' is not a class index in [0, 3)"))
      << status;
}

// A member whose header claims 8 GB in a tiny shard (what the shard reader's fuzzer found: the
// reader allocated the claimed size up front) is a truncated shard, read without that allocation.
TEST(Shards, AMemberClaimingMoreBytesThanTheShardHoldsIsTruncated) {
  testing::TempDir dir;
  std::string path = dir.path() + "/liar.tar";
  {
    auto writer = ShardWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add("k", {{"txt", "short"}}).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  std::string bytes = testing::ReadFile(path);
  ASSERT_EQ(bytes.substr(0, 5), "k.txt");
  bytes.replace(124, 12, std::string("77777777777\0", 12));  // the size field, octal
  unsigned sum = 0;  // the header checksum, recomputed with its own field as spaces
  bytes.replace(148, 8, std::string(8, ' '));
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  bytes.replace(148, 8, absl::StrFormat("%06o", sum) + std::string("\0 ", 2));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok());
  auto sample = (*reader)->Next();
  ASSERT_FALSE(sample.ok());
  EXPECT_TRUE(absl::StrContains(sample.status().message(), "truncated or corrupt tar at k.txt"))
      << sample.status();
}

TEST(Shards, VerifyRefusesAShardThatDiffersFromItsIndex) {
  testing::TempDir dir;
  auto paths = WriteShards(dir.path(), 1, 4);
  ShardSet set;
  set.shards.push_back({paths[0], 4, static_cast<int64_t>(std::filesystem::file_size(paths[0])),
                        *FileSha256(paths[0])});
  dir.Write("train.index.json", IndexJson(set, dir.path()));
  auto reread = OpenShardSet(dir.path() + "/train.index.json", "data.train_shards");
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_EQ(reread->shards[0].url, paths[0]);
  EXPECT_TRUE(VerifyShardSet(*reread).ok());
  std::string bytes = testing::ReadFile(paths[0]);
  bytes[700] ^= 1;
  std::ofstream(paths[0], std::ios::binary | std::ios::trunc) << bytes;
  absl::Status status = VerifyShardSet(*reread);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "SHA-256 differs")) << status;
}

}  // namespace shards_test
}  // namespace kiln::data::shards
