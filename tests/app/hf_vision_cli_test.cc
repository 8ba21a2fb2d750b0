// A Hugging Face ViT through the binary: a tiny random ViTForImageClassification made by
// transformers (tests/components/hf/make_models.py vit) fine-tunes for 20 steps on Fashion-MNIST
// with `kiln train experiment=fashion_mnist model=hf_vit model.pretrained=DIR`, and
// `kiln export format=hf` writes a folder transformers loads with kiln's logits; a folder whose
// images are not the data's is refused in one line. Skipped, saying so, where the .venv has no
// transformers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;

std::string FashionMnistDir() {
  const char* env = std::getenv("KILN_FASHION_MNIST");
  return env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
}

// The stderr line that says what went wrong ("kiln: error: ...").
std::string ErrorLineOf(const std::string& err) {
  size_t at = err.find("kiln: error: ");
  return at == std::string::npos ? "" : err.substr(at, err.find('\n', at) - at);
}

std::vector<std::string> TrainArgs(const std::string& pretrained, const std::string& run) {
  return {KILN_BINARY,
          "train",
          "experiment=fashion_mnist",
          "model=hf_vit",
          "model.pretrained=" + pretrained,
          "data.root=" + FashionMnistDir(),
          "data.batch_size=16",
          "data.precompute_mb=0",
          "trainer.max_steps=20",
          "trainer.limit_val_batches=1",
          "trainer.num_sanity_val_steps=0",
          "trainer.precision=32",
          "trainer.num_threads=1",
          "test=false",
          "hydra.run.dir=" + run};
}

TEST(HfVisionCliTest, VitFineTunesOnFashionMnistAndExportsAFolderThatTransformersLoads) {
  auto probe = RunProcess({KILN_PYTHON_EXE, "-c", "import transformers"});
  if (probe.exit_code != 0) GTEST_SKIP() << "Python transformers not installed: " << probe.err;
  TempDir dir;
  const std::string d = dir.path();
  const std::string scripts = std::string(KILN_SOURCE_DIR) + "/tests/components/hf/";
  auto made = RunProcess({KILN_PYTHON_EXE, scripts + "make_models.py", "vit", d + "/pretrained"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string folder = d + "/pretrained/fashion/model";
  auto trained = RunProcess(TrainArgs(folder, d + "/run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  for (const std::string format : {"hf", "safetensors"}) {
    auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/run", "format=" + format,
                         "hydra.run.dir=" + d + "/run_" + format});
    ASSERT_EQ(e.exit_code, 0) << e.err;
  }
  const std::string config = ReadFile(d + "/run_hf/config.json");
  EXPECT_NE(config.find("\"ViTForImageClassification\""), std::string::npos) << config;
  // The folder's LABEL_0 .. LABEL_9 are Fashion-MNIST's class names from the fine-tuning on.
  EXPECT_NE(config.find("\"9\": \"Ankle boot\""), std::string::npos) << config;
  auto loaded = RunProcess({KILN_PYTHON_EXE, scripts + "check_export.py", d + "/run_hf"});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.out.find("ViTForImageClassification"), std::string::npos) << loaded.out;

  // The exported folder read back by kiln: the trained tensors bit for bit (training moved the
  // head), and on the images transformers saw, transformers' logits.
  auto node = config::ParseYaml("_target_: hf_vit\npretrained: '" + d + "/run_hf'\n", "m.yaml");
  ASSERT_TRUE(node.ok());
  auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto kiln_trained = ReadSafetensors(d + "/run_safetensors/model.safetensors");
  ASSERT_TRUE(kiln_trained.ok()) << kiln_trained.status();
  auto original = ReadSafetensors(folder + "/model.safetensors");
  ASSERT_TRUE(original.ok()) << original.status();
  for (const auto& [name, tensor] : StateDict(**model)) {
    ASSERT_EQ(kiln_trained->count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(tensor, kiln_trained->at(name))) << name;
  }
  EXPECT_FALSE(
      torch::equal(kiln_trained->at("classifier.weight"), original->at("classifier.weight")));
  auto reference = ReadSafetensors(d + "/run_hf/transformers_logits.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(reference->at("pixels").size(0), 8);
  (*model)->eval();
  torch::NoGradGuard no_grad;
  const double diff = ((*model)->forward(reference->at("pixels")) - reference->at("logits"))
                          .abs()
                          .max()
                          .item<double>();
  EXPECT_LT(diff, 1e-5);
  std::printf("hf_vit: max |kiln - transformers| after 20 steps = %.3g\n", diff);

  // A ViT made for 3-channel 16x16 images on Fashion-MNIST (1 channel, 28x28): one line.
  // (Its three labels: task.num_classes=3, or the task stops first, naming that.)
  std::vector<std::string> args = TrainArgs(d + "/pretrained/rgb/model", d + "/wrong");
  args.push_back("task.num_classes=3");
  auto wrong = RunProcess(args);
  EXPECT_NE(wrong.exit_code, 0);
  const std::string line = ErrorLineOf(wrong.err);
  EXPECT_NE(line.find("hf_vit takes images [batch, 3, 16, 16]"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace kiln
