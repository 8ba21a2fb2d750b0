// kiln::Predictor in process, on a model trained by the real `kiln train`: a run directory, its
// checkpoint file and its `kiln export` folder give the same answers, equal to `kiln predict`'s;
// a batch answers as inputs one at a time, a bad input failing alone; concurrent callers get the
// same answers as one caller; the prediction split's answers are `kiln predict`'s file, byte for
// byte.
#include "lib/inference/predictor.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "lib/registry/registry.h"
#include "lib/trainer/prediction_writer.h"
#include "tests/serve/tiny_model.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::ReadFile;

TEST(PredictorTest, RunCheckpointAndExportAnswerAsKilnPredict) {
  testing::TempDir dir;
  testing::TinyModel model = testing::TrainTinyModel(KILN_BINARY, dir.path(), 6);
  ASSERT_EQ(model.kiln_predict.size(), 6u);
  testing::ProcessResult exported =
      testing::RunProcess({KILN_BINARY, "export", "run_dir=" + model.run_dir,
                           "hydra.run.dir=" + dir.path() + "/export"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::vector<std::string> images;
  for (const auto& path : model.pngs) images.push_back(ReadFile(path));

  for (const std::string& path :
       {model.run_dir, model.run_dir + "/checkpoints/last.ckpt", dir.path() + "/export"}) {
    auto predictor = Predictor::Load(path);
    ASSERT_TRUE(predictor.ok()) << path << ": " << predictor.status();
    EXPECT_EQ((*predictor)->model_name(), "mlp");
    EXPECT_FALSE((*predictor)->generates());
    for (size_t i = 0; i < images.size(); ++i) {
      auto answer = (*predictor)->Predict(images[i]);
      ASSERT_TRUE(answer.ok()) << answer.status();
      EXPECT_EQ(answer->class_index, model.kiln_predict[i]["class_index"].get<int64_t>())
          << path << " image " << i;
      EXPECT_NEAR(answer->probability, model.kiln_predict[i]["probability"].get<double>(), 1e-5)
          << path;
      ASSERT_EQ(answer->probabilities.size(), 10u);
      double sum = 0;
      for (double p : answer->probabilities) sum += p;
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }

  // PredictorOptions::device (`kiln serve`'s serve.device) in place of the run's accelerator: cpu
  // answers as above; cuda where there is no GPU, and a name that is no device, are one clear
  // error.
  PredictorOptions on_cpu;
  on_cpu.device = "cpu";
  auto cpu = Predictor::Load(model.run_dir, on_cpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto cpu_answer = (*cpu)->Predict(images[0]);
  ASSERT_TRUE(cpu_answer.ok()) << cpu_answer.status();
  EXPECT_EQ(cpu_answer->class_index, model.kiln_predict[0]["class_index"].get<int64_t>());
  if (!torch::cuda::is_available()) {
    PredictorOptions on_gpu;
    on_gpu.device = "cuda";
    auto gpu = Predictor::Load(model.run_dir, on_gpu);
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(gpu.status().message().find("no CUDA device is available"), std::string::npos)
        << gpu.status();
  }
  PredictorOptions tpu;
  tpu.device = "tpu";
  auto unknown_device = Predictor::Load(model.run_dir, tpu);
  EXPECT_EQ(unknown_device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown_device.status().message().find("must be cpu, cuda or auto, not 'tpu'"),
            std::string::npos)
      << unknown_device.status();

  auto predictor = Predictor::Load(model.run_dir);
  ASSERT_TRUE(predictor.ok());
  const Predictor& p = **predictor;
  // A batch with a bad input in the middle: the bad one fails alone, the others are answered.
  std::vector<std::string_view> batch = {images[0], "not an image", images[1], images[2]};
  auto answers = p.PredictBatch(batch);
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(answers[1].status().message().find("cannot decode image"), std::string::npos)
      << answers[1].status();
  for (size_t k : {0, 2, 3}) {
    ASSERT_TRUE(answers[k].ok()) << answers[k].status();
    size_t image = k == 0 ? 0 : k - 1;
    EXPECT_EQ(answers[k]->class_index, model.kiln_predict[image]["class_index"].get<int64_t>());
  }
  // An empty input, and an image of another size (which the model cannot take): a message each.
  EXPECT_EQ(p.Predict("").status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<uchar> big;
  cv::imencode(".png", cv::Mat(40, 40, CV_8UC1, cv::Scalar(7)), big);
  auto odd = p.Predict(std::string(big.begin(), big.end()));
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("the model cannot take this input"), std::string::npos)
      << odd.status();
  EXPECT_EQ(p.Generate("hello").status().code(), absl::StatusCode::kUnimplemented);

  // Four threads at once, each many times: every answer equals the single caller's.
  std::vector<double> alone;
  for (const auto& image : images) alone.push_back(p.Predict(image)->probability);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        size_t i = static_cast<size_t>((t + round) % images.size());
        auto answer = p.Predict(images[i]);
        if (!answer.ok() || answer->probability != alone[i]) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
}

// The records of `answers` through the jsonl prediction writer, into `dir`: the file's text.
std::string JsonlOf(std::vector<Prediction> answers, const std::string& dir) {
  std::vector<PredictionRecord> records;
  for (Prediction& answer : answers) records.push_back({answer.source, answer.fields});
  auto writer = Registry<PredictionWriter>::Get().Instantiate("jsonl", Options());
  EXPECT_TRUE(writer.ok()) << writer.status();
  auto file = (*writer)->Write(dir, records);
  EXPECT_TRUE(file.ok()) << file.status();
  return ReadFile(*file);
}

// `kiln predict` writes the Predictor's answers for the prediction split (the whole Fashion-MNIST
// test set), byte for byte; trainer.limit_predict_batches keeps the first batches' answers.
TEST(PredictorTest, PredictionSplitAnswersAreKilnPredictsFile) {
  testing::TempDir dir;
  testing::TinyModel model = testing::TrainTinyModel(KILN_BINARY, dir.path(), 1);
  ASSERT_EQ(model.kiln_predict.size(), 1u);
  const std::string kiln_predict = ReadFile(dir.path() + "/predict/predictions.jsonl");
  auto predictor = Predictor::Load(model.run_dir);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  auto answers = (*predictor)->PredictSplit();
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 10000u);
  EXPECT_EQ((*answers)[9999].source, "9999");
  EXPECT_EQ((*answers)[0].probabilities.size(), 10u);
  dir.Write("mine/.keep", "");
  EXPECT_TRUE(JsonlOf(*answers, dir.path() + "/mine") == kiln_predict)
      << "the Predictor's answers differ from kiln predict's file";

  PredictorOptions limited;
  limited.overrides = {"trainer.limit_predict_batches=3", "data.batch_size=5"};
  auto few = Predictor::Load(model.run_dir, limited);
  ASSERT_TRUE(few.ok()) << few.status();
  auto first = (*few)->PredictSplit();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 15u);
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*first)[i].source, std::to_string(i));
    EXPECT_EQ((*first)[i].class_index, (*answers)[i].class_index) << i;
    EXPECT_NEAR((*first)[i].probability, (*answers)[i].probability, 1e-6) << i;
  }
  // A model that answers inputs has no prompt to continue.
  EXPECT_EQ((*few)->Generate().status().code(), absl::StatusCode::kUnimplemented);
}

// quantize=dynamic_int8 answers with the probabilities of the model `kiln export format=torchscript
// quantize=dynamic_int8` writes, loaded by LibTorch alone, on the same preprocessed inputs.
TEST(PredictorTest, DynamicInt8AnswersAsTheExportedInt8Model) {
  testing::TempDir dir;
  testing::TinyModel model = testing::TrainTinyModel(KILN_BINARY, dir.path(), 5);
  ASSERT_EQ(model.kiln_predict.size(), 5u);
  testing::ProcessResult exported =
      testing::RunProcess({KILN_BINARY, "export", "run_dir=" + model.run_dir, "format=torchscript",
                           "quantize=dynamic_int8", "hydra.run.dir=" + dir.path() + "/int8"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  PredictorOptions options;
  options.quantize = "dynamic_int8";
  auto predictor = Predictor::Load(model.run_dir, options);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  std::vector<std::string> images;
  std::vector<std::string_view> views;
  std::vector<torch::Tensor> inputs;
  for (const auto& path : model.pngs) images.push_back(ReadFile(path));
  for (const auto& image : images) {
    views.push_back(image);
    auto example = (*predictor)->Prepare(image);
    ASSERT_TRUE(example.ok()) << example.status();
    inputs.push_back(example->input);
  }
  torch::jit::Module int8 = torch::jit::load(dir.path() + "/int8/model.pt");
  torch::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected =
        torch::softmax(int8.forward({torch::stack(inputs)}).toTensor(), 1).to(torch::kFloat64);
  }
  auto answers = (*predictor)->PredictBatch(views);
  auto floats = Predictor::Load(model.run_dir);
  ASSERT_TRUE(floats.ok());
  double largest_change = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    ASSERT_TRUE(answers[i].ok()) << answers[i].status();
    ASSERT_EQ(answers[i]->probabilities.size(), 10u);
    for (int64_t c = 0; c < 10; ++c) {
      EXPECT_NEAR(answers[i]->probabilities[static_cast<size_t>(c)],
                  expected[static_cast<int64_t>(i)][c].item<double>(), 1e-6)
          << "image " << i << " class " << c;
    }
    auto float_answer = (*floats)->Predict(images[i]);
    ASSERT_TRUE(float_answer.ok());
    largest_change = std::max(
        largest_change,
        std::abs(float_answer->probability - answers[i]->probabilities[float_answer->class_index]));
  }
  // int8 weights move the answers a little, not a lot (and not at all would mean no quantization).
  EXPECT_GT(largest_change, 0.0);
  EXPECT_LT(largest_change, 0.05);

  options.quantize = "int4";
  auto unknown = Predictor::Load(model.run_dir, options);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("quantize=int4: kiln knows dynamic_int8"),
            std::string::npos)
      << unknown.status();
}

TEST(PredictorTest, WhatIsNotAModelIsOneClearError) {
  testing::TempDir dir;
  auto missing = Predictor::Load(dir.path() + "/nothing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no such run directory, checkpoint or export folder"),
            std::string::npos);
  auto empty = Predictor::Load(dir.path());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  dir.Write("junk.ckpt", "not a checkpoint");
  auto junk = Predictor::Load(dir.path() + "/junk.ckpt");
  EXPECT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk.ckpt"), std::string::npos) << junk.status();
}

}  // namespace
}  // namespace kiln
