// kiln::Job, the library's "config in, trained model out": the same overrides through Job::Compose
// and through `kiln train` give bitwise-equal weights; Test() writes test_metrics.yaml; bad input
// is a status with kiln's message, never a crash.
#include "lib/commands/job.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::RunProcess;
using testing::TempDir;

const char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

std::vector<std::string> SmallRun(const std::string& dir) {
  return {"model=mlp",
          "model.hidden=[16]",
          "trainer.max_steps=30",
          "trainer.num_threads=1",
          "trainer.limit_val_batches=2",
          "trainer.num_sanity_val_steps=0",
          "test=false",
          "seed=3",
          "hydra.run.dir=" + dir};
}

// The weights of a run's last.ckpt, loaded through a Job built for evaluation.
std::vector<torch::Tensor> Weights(const std::string& run_dir) {
  std::vector<std::string> overrides = SmallRun(run_dir + "_eval");
  auto job = Job::Compose({overrides}, Job::Purpose::kEvaluate);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return {};
  auto loaded = (*job)->LoadCheckpoint(run_dir + "/checkpoints/last.ckpt");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  std::vector<torch::Tensor> out;
  for (const auto& p : (*job)->task().module().parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(Job, ComposeFitAndTestMatchKilnTrainBitwise) {
  if (!FileExists(std::string(kFashionMnist) + "/t10k-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << kFashionMnist
                 << " is not there (scripts/install_deps.sh fetches Fashion-MNIST)";
  }
  TempDir dir;
  auto job = Job::Compose({SmallRun(dir.path() + "/library")});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)->output_dir(), dir.path() + "/library");
  EXPECT_TRUE(FileExists(dir.path() + "/library/.hydra/config.yaml"));
  ASSERT_TRUE((*job)->Fit().ok());
  auto metrics = (*job)->Test();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(metrics->at("test/acc"), 0.3);  // 30 steps of an MLP: well above chance (0.1)
  EXPECT_TRUE(FileExists(dir.path() + "/library/test_metrics.yaml"));

  std::vector<std::string> argv = {KILN_BINARY, "train"};
  for (const auto& o : SmallRun(dir.path() + "/cli")) argv.push_back(o);
  auto cli = RunProcess(argv);
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  auto a = Weights(dir.path() + "/library"), b = Weights(dir.path() + "/cli");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

TEST(Job, BadInputIsAStatusWithKilnsMessage) {
  TempDir dir;
  auto typo = Job::Compose({{"trainer.max_stepz=3", "hydra.run.dir=" + dir.path() + "/typo"}});
  ASSERT_FALSE(typo.ok());
  EXPECT_TRUE(absl::StrContains(typo.status().message(), "max_stepz")) << typo.status();
  EXPECT_TRUE(absl::StrContains(typo.status().message(), "max_steps"))
      << typo.status();  // did you mean
  EXPECT_FALSE(FileExists(dir.path() + "/typo"))
      << "nothing is written for a config that does not compose";

  auto missing = Job::Compose({{"model=mlp", "hydra.run.dir=" + dir.path() + "/eval"}},
                              Job::Purpose::kEvaluate);
  ASSERT_TRUE(missing.ok()) << missing.status();
  auto fit = (*missing)->Fit();
  EXPECT_EQ(fit.code(), absl::StatusCode::kFailedPrecondition) << fit;
  auto none = (*missing)->LoadCheckpoint("");
  EXPECT_TRUE(absl::StrContains(none.status().message(), "needs a checkpoint: ckpt_path=PATH"))
      << none.status();
  auto absent = (*missing)->LoadCheckpoint(dir.path() + "/no.ckpt");
  EXPECT_FALSE(absent.ok());
  EXPECT_TRUE(absl::StrContains(absent.status().message(), "no.ckpt")) << absent.status();
}

}  // namespace
}  // namespace kiln
