// `kiln train/test/predict` as a user runs them, on small IDX files and image folders the test
// writes: bad inputs end in one line and a non-zero exit with nothing half-written; SIGTERM stops
// with 143 and a resumable checkpoint; kill -9 in the middle of checkpoint writes never leaves a
// broken last.ckpt; tests write a confusion matrix; predict writes predictions.csv.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/idx_data.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::RunProcess;
using testing::TempDir;
using testing::TestAccuracy;
using testing::WriteIdx;

void WriteData(const std::string& dir, int n_train = 512) {
  testing::WriteBrightnessBands(dir, n_train);
}

class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("data/.keep", "");
    WriteData(dir_.path() + "/data");
  }

  std::vector<std::string> Args(std::vector<std::string> extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     "train",
                                     "data.root=" + dir_.path() + "/data",
                                     "model=mlp",
                                     "trainer.max_epochs=2",
                                     "data.batch_size=32",
                                     "hydra.run.dir=" + dir_.path() + "/run",
                                     "trainer.num_threads=1",
                                     "callbacks.early_stopping=null"};
    for (auto& e : extra) {
      if (e == "test" || e == "validate" || e == "export" || e == "predict") {
        argv[1] = e;
        continue;
      }
      if (e == "tune") {  // kiln tune lr_find
        argv[1] = e;
        argv.insert(argv.begin() + 2, "lr_find");
        continue;
      }
      argv.push_back(e);
    }
    return argv;
  }

  testing::ProcessResult Kiln(std::vector<std::string> extra) {
    return RunProcess(Args(std::move(extra)));
  }

  TempDir dir_;
};

// `kiln export format=torchscript`: a traced model.pt with model.json beside it, which Python's
// torch.jit.load runs at any batch size; quantize=dynamic_int8 makes its Linear layers int8.
TEST_F(TrainCliTest, ExportsTorchScriptAndItsInt8Twin) {
  auto r = Kiln({"scheduler=null", "trainer.max_epochs=1", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = dir_.path() + "/run";
  auto e = Kiln(
      {"export", "run_dir=" + run, "format=torchscript", "hydra.run.dir=" + dir_.path() + "/ts"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(e.out, dir_.path() + "/ts/model.pt\n");
  std::string info = testing::ReadFile(dir_.path() + "/ts/model.json");
  for (const char* part : {"\"model\": \"mlp\"", "\"dtype\": \"float32\"", "\"quantization\": null",
                           "\"mean\": [", "\"normalize\""}) {
    EXPECT_NE(info.find(part), std::string::npos) << part << "\n" << info;
  }
  EXPECT_NE(info.find("\"shape\": [\n      -1,\n      1,\n      28,\n      28\n    ]"),
            std::string::npos)
      << info;
  auto q = Kiln({"export", "run_dir=" + run, "format=torchscript", "quantize=dynamic_int8",
                 "hydra.run.dir=" + dir_.path() + "/int8"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(testing::ReadFile(dir_.path() + "/int8/model.json").find("\"linear_layers\": 3"),
            std::string::npos);
  auto bad = Kiln({"export", "run_dir=" + run, "quantize=dynamic_int8",
                   "hydra.run.dir=" + dir_.path() + "/bad"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(
      bad.err.find("\nkiln: error: kiln export: quantize=dynamic_int8 needs format=torchscript\n"),
      std::string::npos)
      << bad.err;
  auto unknown =
      Kiln({"export", "run_dir=" + run, "format=onnx", "hydra.run.dir=" + dir_.path() + "/bad2"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find(
                "\nkiln: error: option 'format' of command 'export' must be one of: safetensors, "
                "torchscript, hf, peft, got onnx (set at command line 'format=onnx')\n"),
            std::string::npos)
      << unknown.err;
  if (RunProcess({KILN_PYTHON_EXE, "-c", "import torch"}).exit_code != 0) {
    GTEST_SKIP() << "Python torch not installed: model.pt is not run in Python";
  }
  for (const char* dir : {"/ts", "/int8"}) {
    auto py = RunProcess({KILN_PYTHON_EXE, "-c",
                          "import sys, torch; m = torch.jit.load(sys.argv[1]); "
                          "print(tuple(m(torch.zeros(5, 1, 28, 28)).shape))",
                          dir_.path() + dir + "/model.pt"});
    EXPECT_EQ(py.exit_code, 0) << py.err;
    EXPECT_EQ(py.out, "(5, 10)\n") << dir;
  }
}

// `kiln predict` honours trainer.limit_predict_batches as Lightning's trainer.predict does (a count
// or a fraction of the batches): the rows of the first batches, equal to the full run's.
TEST_F(TrainCliTest, PredictHonoursLimitPredictBatches) {
  auto r = Kiln({"scheduler=null", "trainer.max_epochs=1", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = dir_.path() + "/run";
  auto Lines = [&](const std::string& name) {
    std::vector<std::string> lines;
    std::istringstream in(testing::ReadFile(dir_.path() + "/" + name + "/predictions.csv"));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  auto all = Kiln({"predict", "run_dir=" + run, "hydra.run.dir=" + dir_.path() + "/all"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::vector<std::string> every = Lines("all");
  ASSERT_EQ(every.size(), 1u + 128u);  // the header, then the 128 test images (4 batches of 32)
  EXPECT_EQ(every[1].rfind("0,", 0), 0u) << every[1];  // IDX images are named by their number
  for (const char* limit :
       {"trainer.limit_predict_batches=2", "trainer.limit_predict_batches=0.5"}) {
    auto some =
        Kiln({"predict", "run_dir=" + run, limit, "hydra.run.dir=" + dir_.path() + "/some"});
    ASSERT_EQ(some.exit_code, 0) << some.err;
    EXPECT_EQ(Lines("some"), std::vector<std::string>(every.begin(), every.begin() + 1 + 64))
        << limit;
  }
}

TEST_F(TrainCliTest, TrainsTestsAndWritesTheRunDirectory) {
  auto r = Kiln({"scheduler=null", "trainer.max_epochs=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = dir_.path() + "/run";
  EXPECT_TRUE(FileExists(run + "/checkpoints/last.ckpt"));
  EXPECT_TRUE(FileExists(run + "/checkpoints/best_model_path.txt"));
  EXPECT_TRUE(FileExists(run + "/metrics.csv"));
  std::string results = testing::ReadFile(run + "/test_metrics.yaml");
  EXPECT_GE(TestAccuracy(results), 0.9) << results << r.err;  // the brightness bands are separable
  // The confusion matrix (task.num_classes=10, the data has 3): 128 test images, 43, 43 and 42 in
  // classes 0-2, none in the others; its diagonal is the accuracy.
  std::ifstream matrix(run + "/test_confusion_matrix.csv");
  std::string line;
  ASSERT_TRUE(std::getline(matrix, line));
  EXPECT_EQ(
      line,
      "true/predicted,T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot");
  int64_t total = 0, correct = 0;
  for (int t = 0; t < 10 && std::getline(matrix, line); ++t) {
    std::vector<int64_t> cells;
    std::stringstream row(line.substr(line.find(',') + 1));
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(std::stoll(cell));
    ASSERT_EQ(cells.size(), 10u) << line;
    int64_t support = std::accumulate(cells.begin(), cells.end(), int64_t{0});
    EXPECT_EQ(support, t < 2 ? 43 : t == 2 ? 42 : 0) << line;
    total += support;
    correct += cells[static_cast<size_t>(t)];
  }
  EXPECT_EQ(total, 128);
  EXPECT_NEAR(static_cast<double>(correct) / 128, TestAccuracy(results), 1e-6);
  EXPECT_NE(results.find("test/acc_class/Pullover: "), std::string::npos) << results;
  EXPECT_NE(testing::ReadFile(run + "/test_per_class_accuracy.csv")
                .find("class,support,correct,accuracy\nT-shirt/top,43,"),
            std::string::npos);
  auto t = Kiln({"test", "ckpt_path=" + run + "/checkpoints/last.ckpt",
                 "hydra.run.dir=" + dir_.path() + "/eval"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_DOUBLE_EQ(TestAccuracy(t.out), TestAccuracy(results)) << t.out;
  auto e = Kiln({"export", "ckpt_path=" + run + "/checkpoints/last.ckpt",
                 "hydra.run.dir=" + dir_.path() + "/export"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(e.out, dir_.path() + "/export/model.safetensors\n");
  std::string weights = testing::ReadFile(dir_.path() + "/export/model.safetensors");
  EXPECT_NE(weights.find("\"layers.0.weight\""), std::string::npos);  // PyTorch names in the header
  EXPECT_NE(testing::ReadFile(dir_.path() + "/export/config.yaml").find("_target_: mlp"),
            std::string::npos);
  // Fine-tuning starts from exported weights: with no training at all, the test accuracy is the
  // exported model's.
  auto init = Kiln({"+model.init_from=" + dir_.path() + "/export/model.safetensors",
                    "trainer.max_epochs=0", "scheduler=null", "callbacks.model_checkpoint=null",
                    "hydra.run.dir=" + dir_.path() + "/init"});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  EXPECT_DOUBLE_EQ(TestAccuracy(testing::ReadFile(dir_.path() + "/init/test_metrics.yaml")),
                   TestAccuracy(results));
  auto wrong =
      Kiln({"+model.init_from=" + dir_.path() + "/export/model.safetensors", "model=cnn",
            "trainer.max_epochs=0", "scheduler=null", "hydra.run.dir=" + dir_.path() + "/wrong"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(
      wrong.err.find(
          "model.safetensors: checkpoint of another model: none of the model's names is in it"),
      std::string::npos)
      << wrong.err;
}

struct BadTrainInput {
  std::string name;
  std::vector<std::string> args;
  std::string mention;
};
void PrintTo(const BadTrainInput& b, std::ostream* os) { *os << b.name; }

class TrainBadInputTest : public TrainCliTest,
                          public ::testing::WithParamInterface<BadTrainInput> {};

TEST_P(TrainBadInputTest, OneLineNonZeroExitNothingWritten) {
  WriteIdx(dir_.path() + "/data/short-images.gz", {512, 28, 28}, std::vector<uint8_t>(512 * 784),
           true, 1000);
  WriteIdx(dir_.path() + "/data/not-idx.gz", {4}, {1, 2, 3, 4});
  std::ofstream(dir_.path() + "/bad.ckpt") << "garbage";
  auto args = GetParam().args;
  for (auto& a : args) {
    size_t at = a.find("DIR");
    if (at != std::string::npos) a.replace(at, 3, dir_.path());
  }
  auto r = Kiln(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  std::string last_line = r.err.substr(r.err.rfind("kiln: error: "));
  EXPECT_EQ(std::count(last_line.begin(), last_line.end(), '\n'), 1) << r.err;
  std::string mention = GetParam().mention;
  if (size_t at = mention.find("DIR"); at != std::string::npos) mention.replace(at, 3, dir_.path());
  EXPECT_NE(last_line.find(mention), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_.path() + "/run/checkpoints/last.ckpt"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainBadInputTest,
    ::testing::Values(
        BadTrainInput{"MissingDatasetPath",
                      {"data.root=DIR/nowhere"},
                      "DIR/nowhere/train-images-idx3-ubyte.gz: no such file"},
        BadTrainInput{"TruncatedIdx",
                      {"data.train_images=short-images.gz"},
                      "short-images.gz: truncated IDX file"},
        BadTrainInput{"NotIdx",
                      {"data.train_images=not-idx.gz"},
                      "not-idx.gz: expected an IDX file with 3 dimensions"},
        BadTrainInput{"UnknownTarget", {"model._target_=resnt"}, "unknown model 'resnt'"},
        BadTrainInput{"UnknownOption", {"+model.widht=3"}, "unknown option 'model.widht'"},
        BadTrainInput{"CorruptCheckpoint",
                      {"ckpt_path=DIR/bad.ckpt"},
                      "bad.ckpt: not a readable kiln checkpoint"},
        BadTrainInput{"MissingCheckpoint",
                      {"test", "ckpt_path=DIR/none.ckpt"},
                      "none.ckpt: no such checkpoint"},
        BadTrainInput{
            "TooFewClassNames",
            {"data.class_names=[a,b]"},
            "data.class_names: 2 names, but DIR/data/train-labels-idx1-ubyte.gz has label 2"},
        BadTrainInput{
            "RepeatedClassName", {"data.class_names=[a,b,a]"}, "option 'data.class_names' of"},
        BadTrainInput{"ModelDoesNotFitTheData",
                      {"model.in_features=100"},
                      "kiln train failed: mat1 and mat2 shapes"},
        BadTrainInput{"LrFindMinAboveMax",
                      {"tune", "tuner.lr_find.min_lr=0.1", "tuner.lr_find.max_lr=0.01"},
                      "option 'tuner.lr_find.max_lr' of kiln tune lr_find must be greater than "
                      "min_lr (0.1), got 0.01"},
        BadTrainInput{"LrFindTooFewSteps",
                      {"tune", "tuner.lr_find.num_training=5"},
                      "option 'tuner.lr_find.num_training' of kiln tune lr_find must be at least "
                      "skip_begin + skip_end + 2 (13)"},
        BadTrainInput{
            "LrFindUnknownOption", {"tune", "+tuner.lr_find.max_lrr=3"}, "'tuner.lr_find.max_lrr'"},
        BadTrainInput{
            "LrFindFromACheckpoint", {"tune", "ckpt_path=DIR/bad.ckpt"}, "not from ckpt_path"},
        BadTrainInput{"LrFindDivergesTooEarly",
                      {"tune", "tuner.lr_find.min_lr=100", "tuner.lr_find.max_lr=1e9"},
                      "kiln tune lr_find: no suggestion"}),
    [](const ::testing::TestParamInfo<BadTrainInput>& info) { return info.param.name; });

// The steepest-descent rule by hand on lr_find.csv's columns (Lightning's suggestion(): skip
// 10 points at the start and 1 at the end, the gradient of the smoothed loss against log(lr), the
// exponential sweep's axis, with second-order differences inside and first-order ones at both
// ends); returns the row.
size_t SteepestDescentByHand(const std::vector<double>& lr, const std::vector<double>& smoothed) {
  std::vector<double> x, y(smoothed.begin() + 10, smoothed.end() - 1);
  for (size_t i = 10; i + 1 < lr.size(); ++i) x.push_back(std::log(lr[i]));
  size_t n = x.size(), best = 0;
  double lowest = 0;
  for (size_t i = 0; i < n; ++i) {
    double g;
    if (i == 0) {
      g = (y[1] - y[0]) / (x[1] - x[0]);
    } else if (i == n - 1) {
      g = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
    } else {
      double a = x[i] - x[i - 1], b = x[i + 1] - x[i];
      g = (a * a * y[i + 1] - b * b * y[i - 1] + (b * b - a * a) * y[i]) / (a * b * (a + b));
    }
    if (i == 0 || g < lowest) {
      lowest = g;
      best = i;
    }
  }
  return best + 10;
}

std::vector<std::vector<std::string>> CsvRows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::istringstream cells_in(line);
    for (std::string cell; std::getline(cells_in, cell, ',');) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    rows.push_back(cells);
  }
  return rows;
}

// One column of a CSV with a header, by name (empty cells left out).
std::vector<std::string> CsvColumn(const std::string& text, const std::string& name) {
  auto rows = CsvRows(text);
  std::vector<std::string> out;
  if (rows.empty()) return out;
  auto at = std::find(rows[0].begin(), rows[0].end(), name);
  if (at == rows[0].end()) return out;
  size_t column = static_cast<size_t>(at - rows[0].begin());
  for (size_t r = 1; r < rows.size(); ++r) {
    if (column < rows[r].size() && !rows[r][column].empty()) out.push_back(rows[r][column]);
  }
  return out;
}

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

bool ChromiumOnPath() {
  return RunProcess({"/bin/sh", "-c",
                     "command -v chromium || command -v chromium-browser || command -v "
                     "google-chrome-stable || command -v google-chrome"})
             .exit_code == 0;
}

// `kiln tune lr_find`: lr_find.csv with one row per step, the lrs growing from min_lr, the
// suggestion printed in one line equal to the steepest-descent rule applied by hand to the CSV,
// the plot as a PNG (or, without Chromium, one line saying how to get it); `--apply` trains with
// that lr (metrics.csv's lr column), and exactly as `kiln train optimizer.lr=SUGGESTION` does:
// the sweep left no trace in the model, the optimizer or the training metrics.
TEST_F(TrainCliTest, LrFindSuggestsTheSteepestDescentPlotsItAndApplyTrainsWithIt) {
  const std::vector<std::string> common = {"scheduler=null", "trainer.max_epochs=1",
                                           "trainer.log_every_n_steps=1", "test=false",
                                           "tuner.lr_find.num_training=30"};
  auto args = common;
  args.insert(args.begin(), "tune");
  args.push_back("hydra.run.dir=" + dir_.path() + "/tune");
  auto r = Kiln(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const std::string prefix = "lr_find: suggested lr ";
  ASSERT_EQ(r.out.rfind(prefix, 0), 0u) << r.out;
  const double suggested = std::stod(r.out.substr(prefix.size()));
  std::string csv = testing::ReadFile(dir_.path() + "/tune/lr_find.csv");
  auto rows = CsvRows(csv);
  ASSERT_GE(rows.size(), 14u) << csv;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"lr", "loss", "smoothed_loss"}));
  std::vector<double> lr, smoothed;
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 3u) << csv;
    lr.push_back(std::stod(rows[i][0]));
    smoothed.push_back(std::stod(rows[i][2]));
    if (i > 1) EXPECT_GT(lr.back(), lr[lr.size() - 2]) << "row " << i;
  }
  EXPECT_EQ(lr.front(), 1e-8);
  if (lr.size() == 30) EXPECT_NEAR(lr.back(), 1.0, 1e-12);
  EXPECT_EQ(suggested, lr[SteepestDescentByHand(lr, smoothed)]) << csv;
  if (ChromiumOnPath()) {
    std::string png = testing::ReadFile(dir_.path() + "/tune/lr_find.png");
    ASSERT_GT(png.size(), 1000u) << r.err;
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  } else {
    std::cerr << "chromium is not installed (apt-get install chromium): lr_find.png not checked\n";
  }
  // Without Chromium on PATH: the CSV all the same, one line saying how to get the plot, exit 0.
  args.back() = "hydra.run.dir=" + dir_.path() + "/nochrome";
  auto bare = RunProcess(Args(args), {{"PATH", "/nonexistent"}});
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_TRUE(FileExists(dir_.path() + "/nochrome/lr_find.csv"));
  EXPECT_FALSE(FileExists(dir_.path() + "/nochrome/lr_find.png"));
  EXPECT_EQ(CountOf(bare.err, "apt-get install chromium"), 1) << bare.err;

  // --apply: the same sweep, then training with the suggestion.
  args.back() = "hydra.run.dir=" + dir_.path() + "/apply";
  args.insert(args.begin() + 1, "--apply");
  auto applied = Kiln(args);
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_EQ(applied.out.substr(0, applied.out.find(';')), r.out.substr(0, r.out.find(';')));
  const std::string suggestion_text =
      r.out.substr(prefix.size(), r.out.find(' ', prefix.size()) - prefix.size());
  EXPECT_NE(applied.err.find("lr_find --apply: training with optimizer.lr=" + suggestion_text),
            std::string::npos)
      << applied.err;
  std::string metrics = testing::ReadFile(dir_.path() + "/apply/metrics.csv");
  auto lrs = CsvColumn(metrics, "lr");
  ASSERT_EQ(lrs.size(), 15u)
      << metrics;  // 460 training images (10% validate) / 32 per batch: 15 steps, each logged
  for (const auto& v : lrs) EXPECT_NEAR(std::stod(v), suggested, suggested * 1e-5) << metrics;
  auto trained =
      Kiln({"scheduler=null", "trainer.max_epochs=1", "trainer.log_every_n_steps=1", "test=false",
            "optimizer.lr=" + suggestion_text, "hydra.run.dir=" + dir_.path() + "/plain"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string plain = testing::ReadFile(dir_.path() + "/plain/metrics.csv");
  for (const char* column : {"train/loss", "train/acc_epoch", "val/loss", "val/acc"}) {
    EXPECT_FALSE(CsvColumn(plain, column).empty()) << column << "\n" << plain;
    EXPECT_EQ(CsvColumn(metrics, column), CsvColumn(plain, column)) << column;
  }
}

TEST_F(TrainCliTest, TuneNeedsAKnownSubcommandAndApplyBelongsToTune) {
  for (const auto& [argv, mention] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{KILN_BINARY, "tune", "lr_fnd"},
            "unknown tune subcommand 'lr_fnd' (did you mean 'lr_find'?)"},
           {{KILN_BINARY, "tune", "model=mlp"},
            "kiln tune needs a subcommand: kiln tune lr_find [--apply]"},
           {{KILN_BINARY, "train", "--apply"}, "--apply is a flag of kiln tune"}}) {
    auto r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.find("kiln: error: "), 0u) << r.err;
    EXPECT_NE(r.err.substr(0, r.err.find('\n')).find(mention), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// A new head on a checkpoint's body: model.init_from with init_ignore, two of the classes with
// 100 samples each, the body frozen for the first epoch. Without init_ignore, with a glob that
// matches nothing or with model.freeze freezing everything: one line, exit 2. `kiln average`
// of the pretraining's last three checkpoints tests like any checkpoint, and refuses averaging
// checkpoints of different models.
TEST_F(TrainCliTest, FineTunesANewHeadOnACheckpointsBodyAndAveragesCheckpoints) {
  auto pre = Kiln({"trainer.max_epochs=4", "test=false", "scheduler=null",
                   "callbacks.model_checkpoint.save_top_k=-1"});
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  std::string run = dir_.path() + "/run";
  std::vector<std::string> tune = {
      "+model.init_from=" + run + "/checkpoints/last.ckpt",
      "task.num_classes=2",
      "task.metrics.acc_top5=null",
      "+data.classes=[2,1]",
      "+data.samples_per_class=100",
      "scheduler=null",
      "trainer.max_epochs=5",
      "optimizer.lr=0.01",
      "hydra.run.dir=" + dir_.path() + "/tune",
      "+callbacks.backbone_finetuning={_target_:backbone_finetuning,params:[layers.*],"
      "unfreeze_at_epoch:1}"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = tune;
    args.insert(args.end(), extra.begin(), extra.end());
    return Kiln(args);
  };
  auto mismatch = with({});
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_NE(
      mismatch.err.find(
          "/last.ckpt: 'head.weight' is [10, 256] there and [2, 256] in the model; to keep the "
          "model's, list it in model.init_ignore (e.g. model.init_ignore=[head.*])"),
      std::string::npos)
      << mismatch.err;
  auto typo = with({"+model.init_ignore=[haed.*]"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("model.init_ignore: 'haed.*' matches no name in the model or in"),
            std::string::npos)
      << typo.err;
  auto everything = with({"+model.init_ignore=[head.*]", "+model.freeze=[*]"});
  EXPECT_EQ(everything.exit_code, 2);
  EXPECT_NE(everything.err.find(
                "model.freeze: [*] freezes every parameter of the model; nothing would train"),
            std::string::npos)
      << everything.err;
  auto tuned = with({"+model.init_ignore=[head.*]"});
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  EXPECT_NE(tuned.err.find("4 loaded, 2 ignored, 0 missing, 0 mismatched, 0 unused"),
            std::string::npos)
      << tuned.err;
  EXPECT_NE(tuned.err.find("backbone_finetuning: unfreezing 4 parameters at epoch 1"),
            std::string::npos)
      << tuned.err;
  EXPECT_GE(TestAccuracy(testing::ReadFile(dir_.path() + "/tune/test_metrics.yaml")),
            0);  // tested on the 2 classes
  EXPECT_NE(
      testing::ReadFile(dir_.path() + "/tune/test_per_class_accuracy.csv").find("\nPullover,"),
      std::string::npos);

  auto average = RunProcess({KILN_BINARY, "average", "last_n=3", "run_dir=" + run,
                             "hydra.run.dir=" + dir_.path() + "/avg"});
  ASSERT_EQ(average.exit_code, 0) << average.err;
  EXPECT_EQ(average.out,
            run + "/checkpoints/averaged.ckpt\n");  // in the run, beside its checkpoints
  auto tested = Kiln({"test", "ckpt_path=" + run + "/checkpoints/averaged.ckpt",
                      "hydra.run.dir=" + dir_.path() + "/eval"});
  ASSERT_EQ(tested.exit_code, 0) << tested.err;
  EXPECT_NE(tested.err.find("the job config is " + run + "/.hydra/config.yaml"), std::string::npos)
      << tested.err;
  EXPECT_GE(TestAccuracy(tested.out), 0) << tested.out;
  auto different = RunProcess(
      {KILN_BINARY, "average",
       "ckpt=[" + run + "/checkpoints/last.ckpt," + dir_.path() + "/tune/checkpoints/last.ckpt]",
       "hydra.run.dir=" + dir_.path() + "/avg2"});
  EXPECT_EQ(different.exit_code, 2);
  EXPECT_NE(different.err.find("hold different models: 'head.bias' is [10] and [2]"),
            std::string::npos)
      << different.err;
}

// Optimizer parameter groups and layer-wise lr decay from the command line: metrics.csv has the
// lr of every group (lr_monitor), each its group's lr times lr_decay^(layers above it); bad
// groups are one line and exit 2 before training.
TEST_F(TrainCliTest, ParamGroupsAndLayerDecayFromTheCommandLine) {
  auto r = Kiln({"trainer.max_epochs=1", "test=false", "scheduler=null", "optimizer.lr=0.001",
                 "+optimizer.lr_decay=0.5",
                 "+optimizer.param_groups=[{params:[head.*],lr:0.05,weight_decay:0}]",
                 "+callbacks.lr_monitor._target_=lr_monitor"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // mlp: layers.0, layers.1 (2 blocks), head; no_decay_norm_and_bias splits each group in two.
  EXPECT_NE(r.err.find("optimizer: 6 parameter groups"), std::string::npos) << r.err;
  std::ifstream csv(dir_.path() + "/run/metrics.csv");
  std::string header, row;
  ASSERT_TRUE(std::getline(csv, header));
  ASSERT_TRUE(std::getline(csv, row));
  std::vector<std::string> keys, values;
  for (std::stringstream in(header); std::getline(in, header, ',');) keys.push_back(header);
  for (std::stringstream in(row); std::getline(in, row, ',');) values.push_back(row);
  std::map<std::string, double> lr;
  for (size_t i = 0; i < keys.size() && i < values.size(); ++i) {
    if (keys[i].rfind("lr-AdamW/", 0) == 0) lr[keys[i].substr(9)] = std::stod(values[i]);
  }
  const std::map<std::string, double> expected = {{"pg0", 0.0005},  {"pg1", 0.0005},
                                                  {"pg2", 0.00025}, {"pg3", 0.00025},
                                                  {"pg4", 0.05},    {"pg5", 0.05}};
  EXPECT_EQ(lr, expected) << header;
  auto typo = Kiln({"+optimizer.param_groups=[{params:[haed.*],lr:0.05}]"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("kiln: error: optimizer.param_groups.0.params: 'haed.*' matches no "
                          "parameter of the model"),
            std::string::npos)
      << typo.err;
  auto twice =
      Kiln({"+optimizer.param_groups=[{params:[head.*],lr:0.05},{params:['*.bias'],lr:0.01}]"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("kiln: error: 'head.bias' is in two parameter groups: "
                           "optimizer.param_groups.0 ('head.*') "
                           "and optimizer.param_groups.1 ('*.bias')"),
            std::string::npos)
      << twice.err;
  auto no_blocks = Kiln({"model=cnn", "+optimizer.lr_decay=0.75"});
  EXPECT_EQ(no_blocks.exit_code, 2);
  EXPECT_NE(no_blocks.err.find(
                "kiln: error: optimizer.lr_decay: the model has no stacked blocks to decay over"),
            std::string::npos)
      << no_blocks.err;
}

TEST_F(TrainCliTest, CheckpointOfAnotherModelIsRefused) {
  auto r = Kiln({"trainer.max_epochs=1", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = Kiln({"test", "model=cnn", "ckpt_path=" + dir_.path() + "/run/checkpoints/last.ckpt",
                 "hydra.run.dir=" + dir_.path() + "/eval"});
  EXPECT_EQ(t.exit_code, 2);
  EXPECT_NE(t.err.find("checkpoint of model 'mlp', but the config builds model 'cnn'"),
            std::string::npos)
      << t.err;
}

// A checkpoint knows its config: test, validate, predict and export start from the config of the
// run that trained it (RUN/.hydra/config.yaml), so `ckpt_path=` (or `run_dir=`) alone rebuilds a
// non-default model on the run's data; overrides apply on top.
TEST_F(TrainCliTest, CommandsStartFromTheConfigOfTheRunThatTrainedTheCheckpoint) {
  auto r = Kiln({"trainer.max_epochs=1", "model.hidden=[24]", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run = dir_.path() + "/run", ckpt = run + "/checkpoints/last.ckpt";
  auto only = [&](std::vector<std::string> args) {
    args.insert(args.begin(), KILN_BINARY);
    return RunProcess(args);
  };
  // The way it worked before: every training override repeated.
  auto repeated = Kiln(
      {"test", "ckpt_path=" + ckpt, "model.hidden=[24]", "hydra.run.dir=" + dir_.path() + "/t0"});
  ASSERT_EQ(repeated.exit_code, 0) << repeated.err;
  ASSERT_GT(TestAccuracy(repeated.out), 0) << repeated.out;
  // Now the checkpoint alone (the defaults would build a cnn on /usr/share/datasets).
  auto t = only({"test", "ckpt_path=" + ckpt, "hydra.run.dir=" + dir_.path() + "/t1"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_DOUBLE_EQ(TestAccuracy(t.out), TestAccuracy(repeated.out)) << t.out;
  // The command's own .hydra records the choices the job was made of: the run's.
  std::string hydra_yaml = testing::ReadFile(dir_.path() + "/t1/.hydra/hydra.yaml");
  EXPECT_NE(hydra_yaml.find("model: mlp"), std::string::npos) << hydra_yaml;
  auto by_run = only({"test", "run_dir=" + run, "hydra.run.dir=" + dir_.path() + "/t2"});
  ASSERT_EQ(by_run.exit_code, 0) << by_run.err;
  EXPECT_DOUBLE_EQ(TestAccuracy(by_run.out), TestAccuracy(repeated.out)) << by_run.out;
  auto e = only({"export", "ckpt_path=" + ckpt, "hydra.run.dir=" + dir_.path() + "/export"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  std::string exported = testing::ReadFile(dir_.path() + "/export/config.yaml");
  EXPECT_NE(exported.find("_target_: mlp"), std::string::npos) << exported;
  EXPECT_NE(exported.find("root: " + dir_.path() + "/data"), std::string::npos) << exported;
  EXPECT_NE(
      testing::ReadFile(dir_.path() + "/export/model.safetensors").find("\"layers.0.weight\""),
      std::string::npos);
  // --cfg job shows the config the command will run: the run's, the command line on top.
  auto shown = only({"test", "ckpt_path=" + ckpt, "trainer.limit_test_batches=2", "--cfg", "job"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("_target_: mlp"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("limit_test_batches: 2"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("- 24"), std::string::npos) << shown.out;
  // An override on top: test on the 512 training images instead of the 128 test images.
  auto other =
      only({"test", "ckpt_path=" + ckpt, "data.test_images=train-images-idx3-ubyte.gz",
            "data.test_labels=train-labels-idx1-ubyte.gz", "hydra.run.dir=" + dir_.path() + "/t3"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  std::string matrix = testing::ReadFile(dir_.path() + "/t3/test_confusion_matrix.csv");
  int64_t total = 0;
  std::stringstream rows(matrix.substr(matrix.find('\n') + 1));
  for (std::string line; std::getline(rows, line);) {
    std::stringstream cells(line.substr(line.find(',') + 1));
    for (std::string cell; std::getline(cells, cell, ',');) total += std::stoll(cell);
  }
  EXPECT_EQ(total, 512) << matrix;
  // stored_config=false starts from the defaults, as before: the checkpoint's model is not the
  // default one.
  auto defaults =
      only({"test", "ckpt_path=" + ckpt, "stored_config=false",
            "data.root=" + dir_.path() + "/data", "hydra.run.dir=" + dir_.path() + "/t4"});
  EXPECT_EQ(defaults.exit_code, 2);
  EXPECT_NE(defaults.err.find("checkpoint of model 'mlp', but the config builds model 'cnn'"),
            std::string::npos)
      << defaults.err;
  // A checkpoint outside any run directory works as before: the command line says everything.
  std::filesystem::copy_file(ckpt, dir_.path() + "/moved.ckpt");
  auto moved = Kiln({"test", "ckpt_path=" + dir_.path() + "/moved.ckpt", "model.hidden=[24]",
                     "hydra.run.dir=" + dir_.path() + "/t5"});
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_DOUBLE_EQ(TestAccuracy(moved.out), TestAccuracy(repeated.out)) << moved.out;
  auto alone = only({"test", "ckpt_path=" + dir_.path() + "/moved.ckpt",
                     "data.root=" + dir_.path() + "/data", "hydra.run.dir=" + dir_.path() + "/t6"});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("checkpoint of model 'mlp', but the config builds model 'cnn'"),
            std::string::npos)
      << alone.err;
}

// Lightning's trainer.test(ckpt_path="best") for a finished run: `kiln test run_dir=RUN
// ckpt_path=best` takes RUN's config and the checkpoint RUN recorded as its best, and gives exactly
// the test metrics the fit reported, wherever RUN has moved since.
TEST_F(TrainCliTest, TestingARunsBestCheckpointGivesTheFitsTestMetrics) {
  auto r = Kiln({"model.hidden=[24]"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string fit_metrics = testing::ReadFile(dir_.path() + "/run/test_metrics.yaml");
  ASSERT_NE(fit_metrics.find("test/acc"), std::string::npos) << fit_metrics;
  std::filesystem::rename(dir_.path() + "/run", dir_.path() + "/moved");
  auto t = RunProcess({KILN_BINARY, "test", "run_dir=" + dir_.path() + "/moved", "ckpt_path=best",
                       "hydra.run.dir=" + dir_.path() + "/best"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(testing::ReadFile(dir_.path() + "/best/test_metrics.yaml"), fit_metrics);
  std::string best = testing::ReadFile(dir_.path() + "/moved/checkpoints/best_model_path.txt");
  std::string name = best.substr(best.find_last_of('/') + 1);
  name.erase(name.find_last_not_of("\n") + 1);
  EXPECT_NE(t.err.find("ckpt_path=best: " + dir_.path() + "/moved's best checkpoint, " +
                       dir_.path() + "/moved/checkpoints/" + name),
            std::string::npos)
      << t.err;
}

TEST_F(TrainCliTest, AMissingOrBrokenRunOrCheckpointIsOneLine) {
  auto r = Kiln({"trainer.max_epochs=1", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run = dir_.path() + "/run";
  std::ofstream(run + "/checkpoints/broken.ckpt") << "garbage";
  dir_.Write("notarun/.keep", "");
  dir_.Write("badrun/.hydra/config.yaml", "model: [unclosed\n");
  dir_.Write("badrun/checkpoints/last.ckpt", "garbage");
  dir_.Write("nobest/.hydra/config.yaml", testing::ReadFile(run + "/.hydra/config.yaml"));
  struct Case {
    std::vector<std::string> args;
    std::string mention;
  };
  for (const Case& c : std::vector<Case>{
           {{"test", "run_dir=" + dir_.path() + "/notarun"},
            "run_dir=" + dir_.path() + "/notarun: not a kiln run directory"},
           {{"test", "run_dir=" + dir_.path() + "/nowhere"}, "not a kiln run directory"},
           {{"export", "ckpt_path=" + dir_.path() + "/badrun/checkpoints/last.ckpt"},
            dir_.path() + "/badrun/.hydra/config.yaml"},
           {{"export", "ckpt_path=" + run + "/checkpoints/none.ckpt"},
            "none.ckpt: no such checkpoint"},
           {{"test", "ckpt_path=" + run + "/checkpoints/broken.ckpt"},
            "broken.ckpt: not a readable kiln checkpoint"},
           {{"test", "run_dir=" + dir_.path() + "/nobest", "ckpt_path=best"},
            "/nobest recorded no best checkpoint"},
           {{"test", "ckpt_path=" + run + "/checkpoints/last.ckpt", "experiment=fashion_mnist"},
            "'experiment=fashion_mnist' changes the whole config"},
       }) {
    std::vector<std::string> argv = {KILN_BINARY};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.push_back("data.root=" + dir_.path() + "/data");
    argv.push_back("hydra.run.dir=" + dir_.path() + "/eval");
    auto e = RunProcess(argv);
    EXPECT_EQ(e.exit_code, 2) << c.args[1] << ": " << e.err;
    size_t at = e.err.rfind("kiln: error: ");
    ASSERT_NE(at, std::string::npos) << e.err;
    std::string line = e.err.substr(at);
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << e.err;
    EXPECT_NE(line.find(c.mention), std::string::npos) << c.args[1] << ": " << e.err;
    EXPECT_EQ(e.err.find("terminate called"), std::string::npos) << e.err;
  }
}

// trainer.accelerator holds for every command: without a CUDA device, cuda is one line and exit 2
// for test and validate as for train (before, they ran on the CPU whatever it said).
TEST_F(TrainCliTest, AcceleratorCudaWithoutADeviceIsRefusedByEveryCommand) {
  auto r = Kiln({"trainer.max_epochs=1", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.err.find("training on cuda") != std::string::npos) GTEST_SKIP() << "this machine has CUDA";
  // And why, where this machine has no CUDA driver: kiln did not load its CUDA module.
  const bool driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;
  const std::string refused =
      std::string("trainer.accelerator=cuda, but no CUDA device is available") +
      (driver ? "" : ": no CUDA driver (libcuda.so.1) on this machine");
  auto fit = Kiln({"trainer.accelerator=cuda", "hydra.run.dir=" + dir_.path() + "/cuda"});
  EXPECT_EQ(fit.exit_code, 2);
  auto error_line = [](const std::string& err) {
    size_t at = err.rfind("kiln: error: ");
    return at == std::string::npos ? err : err.substr(at);
  };
  EXPECT_EQ(error_line(fit.err), "kiln: error: " + refused + "\n") << fit.err;
  for (const char* command : {"test", "validate"}) {
    auto e = Kiln({command, "ckpt_path=" + dir_.path() + "/run/checkpoints/last.ckpt",
                   "trainer.accelerator=cuda", "hydra.run.dir=" + dir_.path() + "/eval"});
    EXPECT_EQ(e.exit_code, 2) << command;
    EXPECT_EQ(error_line(e.err), "kiln: error: " + refused + "\n") << command << ": " << e.err;
  }
}

// data.on_device=true follows the trainer's device: with trainer.accelerator=cpu the data stay in
// host memory, said in one warning (they once went to the GPU anyway where there was one, and
// each batch came back to the CPU).
TEST_F(TrainCliTest, DataOnDeviceFollowsTheTrainersDevice) {
  auto r = Kiln(
      {"trainer.max_epochs=1", "test=false", "trainer.accelerator=cpu", "data.on_device=true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.err.find(
          "data.on_device=true: this process runs on the CPU, so the data stay in host memory"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("training on cpu"), std::string::npos) << r.err;
}

// A kiln built with LibTorch whose libraries are not beside it (a copy of the binary; its own
// libkiln_core comes through the build's runpath) names the missing library instead of calling
// the first model or task "unknown".
TEST_F(TrainCliTest, AKilnWithoutItsLibrariesNamesTheMissingOne) {
  const std::string copy = dir_.path() + "/copy/bin/kiln";
  std::filesystem::create_directories(dir_.path() + "/copy/bin");
  std::filesystem::copy_file(KILN_BINARY, copy);
  std::vector<std::string> argv = Args({"trainer.max_epochs=1"});
  argv[0] = copy;
  auto r = RunProcess(argv);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(
                "kiln: error: " + dir_.path() +
                "/copy/bin/../lib/libkiln_engine.so is missing: this kiln was built with LibTorch"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(FileExists(dir_.path() + "/run/checkpoints"));
}

// Starts training in the background and returns its pid.
pid_t Spawn(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

TEST_F(TrainCliTest, SigtermExitsWith143AndLeavesAResumableCheckpoint) {
  WriteData(dir_.path() + "/data", 4096);
  pid_t pid = Spawn(Args({"trainer.max_epochs=50", "callbacks.model_checkpoint.save_last=false"}));
  std::string ckpt = dir_.path() + "/run/checkpoints/last.ckpt";
  std::this_thread::sleep_for(std::chrono::seconds(3));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  ASSERT_TRUE(FileExists(ckpt));
  auto r = Kiln({"trainer.max_epochs=1", "ckpt_path=last", "test=false"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resumed from " + ckpt), std::string::npos) << r.err;
}

TEST_F(TrainCliTest, Kill9DuringCheckpointWritesNeverBreaksTheLastCheckpoint) {
  // A checkpoint every optimizer step, killed at varying moments: last.ckpt is always whole.
  for (int attempt = 0; attempt < 4; ++attempt) {
    pid_t pid =
        Spawn(Args({"trainer.max_epochs=50", "+callbacks.model_checkpoint.every_n_train_steps=1",
                    "callbacks.model_checkpoint.save_top_k=0"}));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + 137 * attempt));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::string ckpt = dir_.path() + "/run/checkpoints/last.ckpt";
    if (!FileExists(ckpt)) continue;  // killed before the first checkpoint
    auto t = Kiln({"test", "ckpt_path=" + ckpt, "hydra.run.dir=" + dir_.path() + "/eval"});
    EXPECT_EQ(t.exit_code, 0) << "attempt " << attempt << ": " << t.err;
  }
}

// A 24-bit BMP of a w x h gray image with value `v` (rows bottom-up, padded to 4 bytes).
void WriteBmp(const std::string& path, int w, int h, uint8_t v) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  int row = (3 * w + 3) / 4 * 4;
  uint32_t size = 54 + static_cast<uint32_t>(row * h);
  auto u32 = [](uint32_t x) {
    return std::string{char(x), char(x >> 8), char(x >> 16), char(x >> 24)};
  };
  std::string bytes = "BM" + u32(size) + u32(0) + u32(54) + u32(40) +
                      u32(static_cast<uint32_t>(w)) + u32(static_cast<uint32_t>(h)) +
                      std::string{1, 0, 24, 0} + u32(0) + u32(static_cast<uint32_t>(row * h)) +
                      u32(2835) + u32(2835) + u32(0) + u32(0);
  for (int y = 0; y < h; ++y)
    bytes += std::string(static_cast<size_t>(3 * w), static_cast<char>(v)) +
             std::string(static_cast<size_t>(row - 3 * w), 0);
  std::ofstream(path, std::ios::binary) << bytes;
}

// Class folders dark/, light/, mid/ of 12x12 gray images: the class is a brightness band.
void WriteImageFolder(const std::string& root, int per_class) {
  std::mt19937 rng(5);
  const std::vector<std::pair<std::string, int>> classes = {
      {"dark", 20}, {"light", 200}, {"mid", 110}};
  for (const auto& [name, base] : classes) {
    for (int i = 0; i < per_class; ++i) {
      WriteBmp(root + "/" + name + "/img" + std::to_string(i) + ".bmp", 12, 12,
               static_cast<uint8_t>(base + rng() % 30));
    }
  }
}

class ImageFolderCliTest : public TrainCliTest {
 protected:
  void SetUp() override {
    WriteImageFolder(dir_.path() + "/images/train", 40);
    WriteImageFolder(dir_.path() + "/images/test", 10);
  }
  testing::ProcessResult KilnImages(std::vector<std::string> extra) {
    std::vector<std::string> args = {"data=image_folder",
                                     "data.root=" + dir_.path() + "/images/train",
                                     "data.test_root=" + dir_.path() + "/images/test",
                                     "data.size=28",
                                     "data.grayscale=true",
                                     "data.transforms=null",
                                     "data.batch_size=16",
                                     "task.num_classes=3"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Kiln(args);
  }
};

TEST_F(ImageFolderCliTest, TrainsTestsWithNamedClassesAndPredicts) {
  auto r = KilnImages({"trainer.max_epochs=15", "optimizer.lr=0.01", "scheduler=null"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = dir_.path() + "/run";
  std::string results = testing::ReadFile(run + "/test_metrics.yaml");
  EXPECT_GE(TestAccuracy(results), 0.9) << results << r.err;
  EXPECT_NE(results.find("test/acc_class/mid: "), std::string::npos) << results;
  std::string matrix = testing::ReadFile(run + "/test_confusion_matrix.csv");
  EXPECT_EQ(matrix.substr(0, matrix.find('\n')), "true/predicted,dark,light,mid");
  EXPECT_NE(r.err.find("test accuracy per class: dark "), std::string::npos) << r.err;

  // predict over the test folder: a row per image with its folder's class for nearly all.
  auto p = KilnImages({"predict", "ckpt_path=" + run + "/checkpoints/last.ckpt",
                       "data.root=" + dir_.path() + "/images/test",
                       "hydra.run.dir=" + dir_.path() + "/predict"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, dir_.path() + "/predict/predictions.csv\n");
  std::ifstream csv(dir_.path() + "/predict/predictions.csv");
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_EQ(line, "path,class_index,class,probability");
  int rows = 0, right = 0;
  while (std::getline(csv, line)) {
    ++rows;
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    ASSERT_EQ(cells.size(), 4u) << line;
    std::string folder = std::filesystem::path(cells[0]).parent_path().filename().string();
    right += folder == cells[2];
    double probability = std::stod(cells[3]);
    EXPECT_GT(probability, 1.0 / 3) << line;
    EXPECT_LE(probability, 1.0) << line;
  }
  EXPECT_EQ(rows, 30);
  EXPECT_GE(right, 27);

  // The same predictions through the jsonl writer: one object per image, the same rows as the CSV.
  auto j =
      KilnImages({"predict", "ckpt_path=" + run + "/checkpoints/last.ckpt",
                  "data.root=" + dir_.path() + "/images/test",
                  "hydra.run.dir=" + dir_.path() + "/predict_jsonl", "+prediction_writer=jsonl"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(j.out, dir_.path() + "/predict_jsonl/predictions.jsonl\n");
  std::ifstream jsonl(dir_.path() + "/predict_jsonl/predictions.jsonl");
  std::ifstream csv_again(dir_.path() + "/predict/predictions.csv");
  std::getline(csv_again, line);  // header
  int json_rows = 0;
  for (std::string json; std::getline(jsonl, json); ++json_rows) {
    ASSERT_TRUE(std::getline(csv_again, line));
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    ASSERT_EQ(cells.size(), 4u) << line;
    EXPECT_EQ(json, "{\"path\":\"" + cells[0] + "\",\"class_index\":" + cells[1] + ",\"class\":\"" +
                        cells[2] + "\",\"probability\":" + json.substr(json.rfind(':') + 1))
        << json;
    EXPECT_NEAR(std::stod(json.substr(json.rfind(':') + 1)), std::stod(cells[3]), 1e-6) << json;
  }
  EXPECT_EQ(json_rows, 30);
}

TEST_F(ImageFolderCliTest, CorruptImageEndsTrainingWithOneLineNamingTheFile) {
  std::string broken = dir_.path() + "/images/train/mid/broken.bmp";
  std::ofstream(broken) << "BM this is not a bitmap";
  auto r = KilnImages({"trainer.max_epochs=1", "data.val_fraction=0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  std::string last_line = r.err.substr(r.err.rfind("kiln: error: "));
  EXPECT_EQ(std::count(last_line.begin(), last_line.end(), '\n'), 1) << r.err;
  EXPECT_NE(last_line.find(broken + ": cannot decode image"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_.path() + "/run/checkpoints/last.ckpt"));
}

// A prediction input that cannot be decoded stops `kiln predict` with one line naming the file,
// and nothing is written.
TEST_F(ImageFolderCliTest, CorruptImageEndsPredictWithOneLineNamingTheFile) {
  auto r = KilnImages({"trainer.max_epochs=1", "scheduler=null", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string broken = dir_.path() + "/images/test/mid/broken.bmp";
  std::ofstream(broken) << "BM this is not a bitmap";
  auto p = KilnImages({"predict", "run_dir=" + dir_.path() + "/run",
                       "data.root=" + dir_.path() + "/images/test",
                       "hydra.run.dir=" + dir_.path() + "/predict"});
  EXPECT_EQ(p.exit_code, 2) << p.err;
  std::string last_line = p.err.substr(p.err.rfind("kiln: error: "));
  EXPECT_EQ(std::count(last_line.begin(), last_line.end(), '\n'), 1) << p.err;
  EXPECT_NE(last_line.find(broken + ": cannot decode image"), std::string::npos) << p.err;
  EXPECT_FALSE(FileExists(dir_.path() + "/predict/predictions.csv"));
}

TEST_F(ImageFolderCliTest, PredictNeedsACheckpoint) {
  auto r = KilnImages({"predict"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kiln predict needs a checkpoint: ckpt_path=PATH"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace kiln
