// What the serving tests start from: a small MLP trained for a few steps on Fashion-MNIST by the
// real `kiln train`, the first test images as PNG files (lossless: the pixels kiln predict reads
// from the IDX file), and `kiln predict`'s answers for the whole test set (jsonl).
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace kiln::testing {

struct TinyModel {
  std::string run_dir;
  std::vector<std::string> pngs;             // test images 0..n-1
  std::vector<nlohmann::json> kiln_predict;  // predictions.jsonl rows, by test image
};

inline std::string FashionMnist() {
  const char* env = std::getenv("KILN_FASHION_MNIST");
  return env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
}

// Trains into dir/run, writes dir/imgI.png for the first `images` test images and runs
// `kiln predict` into dir/predict. Fails the test (ADD_FAILURE) when a step does.
inline TinyModel TrainTinyModel(const std::string& kiln, const std::string& dir, int images) {
  TinyModel model;
  model.run_dir = dir + "/run";
  ProcessResult train =
      RunProcess({kiln, "train", "model=mlp", "model.hidden=[16]", "trainer.max_steps=20",
                  "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0", "test=false",
                  "data.root=" + FashionMnist(), "hydra.run.dir=" + model.run_dir});
  if (train.exit_code != 0) {
    ADD_FAILURE() << "kiln train failed: " << train.err;
    return model;
  }
  gzFile file = gzopen((FashionMnist() + "/t10k-images-idx3-ubyte.gz").c_str(), "rb");
  if (file == nullptr) {
    ADD_FAILURE() << "no Fashion-MNIST test images";
    return model;
  }
  std::vector<unsigned char> header(16), pixels(28 * 28);
  gzread(file, header.data(), 16);
  for (int i = 0; i < images; ++i) {
    gzread(file, pixels.data(), 28 * 28);
    cv::Mat image(28, 28, CV_8UC1, pixels.data());
    std::string path = dir + "/img" + std::to_string(i) + ".png";
    cv::imwrite(path, image);
    model.pngs.push_back(path);
  }
  gzclose(file);
  ProcessResult predict =
      RunProcess({kiln, "predict", "run_dir=" + model.run_dir, "+prediction_writer=jsonl",
                  "hydra.run.dir=" + dir + "/predict"});
  if (predict.exit_code != 0) {
    ADD_FAILURE() << "kiln predict failed: " << predict.err;
    return model;
  }
  std::istringstream lines(ReadFile(dir + "/predict/predictions.jsonl"));
  std::string line;
  while (std::getline(lines, line) && static_cast<int>(model.kiln_predict.size()) < images) {
    model.kiln_predict.push_back(nlohmann::json::parse(line));
  }
  return model;
}

}  // namespace kiln::testing
