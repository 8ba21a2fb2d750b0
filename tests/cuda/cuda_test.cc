// kiln on a CUDA GPU, as a user runs it (`ctest -L cuda`): training and its log, bf16 on the GPU,
// checkpoints that move GPU -> CPU -> GPU, `kiln test` and `kiln predict` on the GPU equal to the
// CPU's, CUDA graphs equal to eager mode, data parallel with two processes on one GPU, and fsdp
// training and resuming on the GPU (over NCCL with two GPUs). Every test skips, with the reason,
// where there is no GPU (CI), so the file builds and runs everywhere.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/grad_scaler_check.h"
#include "tests/support/idx_data.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::RunProcess;
using testing::TempDir;
using testing::TestAccuracy;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here";
    dir_.Write("data/.keep", "");
    testing::WriteBrightnessBands(dir_.path() + "/data");
  }

  // `kiln train` of the CNN on the brightness bands, into RUN (a folder under the test's).
  testing::ProcessResult Train(const std::string& run, std::vector<std::string> extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     "train",
                                     "data.root=" + dir_.path() + "/data",
                                     "model=cnn",
                                     "scheduler=null",
                                     "trainer.max_epochs=3",
                                     "data.batch_size=32",
                                     "hydra.run.dir=" + dir_.path() + "/" + run,
                                     "trainer.num_threads=2",
                                     "callbacks.early_stopping=null"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  }
  testing::ProcessResult Kiln(std::vector<std::string> args) {
    args.insert(args.begin(), KILN_BINARY);
    return RunProcess(args);
  }
  double Accuracy(const std::string& run) {
    return TestAccuracy(testing::ReadFile(dir_.path() + "/" + run + "/test_metrics.yaml"));
  }

  // predictions.csv of a `kiln predict` run: each row's class index and probability.
  std::vector<std::pair<int, double>> Predictions(const std::string& run) {
    std::istringstream in(testing::ReadFile(dir_.path() + "/" + run + "/predictions.csv"));
    std::vector<std::pair<int, double>> rows;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> cells;
      std::stringstream row(line);
      for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
      if (cells.size() < 4) continue;
      rows.emplace_back(std::atoi(cells[1].c_str()), std::atof(cells[3].c_str()));
    }
    return rows;
  }

  TempDir dir_;
};

// The model, its optimizer state (AdamW's fused kernel takes parameters, gradients and state on
// one device, so it would fail otherwise) and the metrics live on the GPU; the log names it once.
TEST_F(CudaTest, TrainsOnTheGpuAndSaysWhichOne) {
  auto r = Train("run", {"trainer.accelerator=cuda"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("training on cuda"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("compute capability"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cuDNN"), std::string::npos) << r.err;
  EXPECT_GE(Accuracy("run"), 0.9) << r.err;
  // data.on_device: the precomputed splits in GPU memory, batches made there.
  auto resident = Train("resident", {"trainer.accelerator=cuda", "data.on_device=true"});
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  EXPECT_GE(Accuracy("resident"), 0.9) << resident.err;
  // auto picks the GPU too.
  auto a = Train("auto", {"trainer.max_epochs=1"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("training on cuda"), std::string::npos) << a.err;
  // A list of GPU ids (Lightning's devices=[0]): that GPU.
  auto listed = Train("listed", {"trainer.max_epochs=1", "trainer.devices=[0]"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.err.find("training on cuda"), std::string::npos) << listed.err;
}

TEST_F(CudaTest, MixedPrecisionTrainsOnTheGpu) {
  auto mixed = Train("mixed", {"trainer.accelerator=cuda", "trainer.precision=bf16-mixed"});
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_NE(mixed.err.find("precision bf16-mixed (the GPU computes bf16 natively)"),
            std::string::npos)
      << mixed.err;
  EXPECT_GE(Accuracy("mixed"), 0.9) << mixed.err;
  auto pure = Train("true", {"trainer.accelerator=cuda", "trainer.precision=bf16-true"});
  ASSERT_EQ(pure.exit_code, 0) << pure.err;
  EXPECT_GE(Accuracy("true"), 0.9) << pure.err;
  // 16-mixed: float16 autocast with loss scaling.
  auto half = Train("half", {"trainer.accelerator=cuda", "trainer.precision=16-mixed"});
  ASSERT_EQ(half.exit_code, 0) << half.err;
  EXPECT_NE(half.err.find("precision 16-mixed (float16 autocast, dynamic loss scaling"),
            std::string::npos)
      << half.err;
  EXPECT_GE(Accuracy("half"), 0.9) << half.err;
  // TF32 and cuDNN's benchmark mode are options; the run is the same job.
  auto tf32 = Train("tf32", {"trainer.accelerator=cuda", "trainer.matmul_precision=high",
                             "trainer.cudnn_benchmark=true", "trainer.max_epochs=2"});
  ASSERT_EQ(tf32.exit_code, 0) << tf32.err;
  EXPECT_GE(Accuracy("tf32"), 0.9) << tf32.err;
}

// 16-mixed's dynamic loss scaling with the gradients on the GPU: a planted overflow (and a NaN) is
// skipped and the scale backs off; clean steps grow it; the state checkpoints.
TEST_F(CudaTest, LossScalingSkipsAPlantedOverflowAndBacksOff) {
  testing::CheckGradScaler(torch::Device(torch::kCUDA, 0));
}

// A checkpoint written on the GPU resumes on the CPU, and that one on the GPU again.
TEST_F(CudaTest, CheckpointsMoveFromGpuToCpuAndBack) {
  auto gpu = Train("gpu", {"trainer.accelerator=cuda", "trainer.max_epochs=1", "test=false"});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  std::string ckpt = dir_.path() + "/gpu/checkpoints/last.ckpt";
  ASSERT_TRUE(FileExists(ckpt));
  auto cpu = Train("cpu", {"trainer.accelerator=cpu", "trainer.max_epochs=2", "test=false",
                           "ckpt_path=" + ckpt});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_NE(cpu.err.find("training on cpu"), std::string::npos) << cpu.err;
  std::string ckpt2 = dir_.path() + "/cpu/checkpoints/last.ckpt";
  ASSERT_TRUE(FileExists(ckpt2));
  auto back =
      Train("back", {"trainer.accelerator=cuda", "trainer.max_epochs=3", "ckpt_path=" + ckpt2});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_NE(back.err.find("training on cuda"), std::string::npos) << back.err;
  EXPECT_GE(Accuracy("back"), 0.9) << back.err;
}

// `kiln test` and `kiln predict` on the GPU give the CPU's answers: the same classes, the
// probabilities within 1e-4.
TEST_F(CudaTest, TestAndPredictOnTheGpuEqualTheCpu) {
  auto r = Train("run", {"trainer.accelerator=cuda", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string ckpt = dir_.path() + "/run/checkpoints/last.ckpt";
  for (const char* device : {"cuda", "cpu"}) {
    auto t = Kiln({"test", "ckpt_path=" + ckpt, std::string("trainer.accelerator=") + device,
                   "hydra.run.dir=" + dir_.path() + "/test_" + device});
    ASSERT_EQ(t.exit_code, 0) << t.err;
    auto p = Kiln({"predict", "run_dir=" + dir_.path() + "/run",
                   std::string("trainer.accelerator=") + device,
                   "hydra.run.dir=" + dir_.path() + "/predict_" + device});
    ASSERT_EQ(p.exit_code, 0) << p.err;
  }
  EXPECT_EQ(Accuracy("test_cuda"), Accuracy("test_cpu"));
  auto on_gpu = Predictions("predict_cuda"), on_cpu = Predictions("predict_cpu");
  ASSERT_EQ(on_gpu.size(), 128u);
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    EXPECT_EQ(on_gpu[i].first, on_cpu[i].first) << i;
    EXPECT_NEAR(on_gpu[i].second, on_cpu[i].second, 1e-4) << i;
  }
}

// trainer.cuda_graphs: the step captured after warm-up and replayed trains the model eager mode
// trains, within float rounding (cuDNN's and the replay's kernels may differ in the last bits):
// the same test loss within 0.01 and accuracy within 2 points, over three epochs whose last batch
// (another shape) runs eagerly. With gradient clipping and a per-step schedule too. What cannot be
// captured is refused in one line.
TEST_F(CudaTest, CudaGraphsTrainAsEagerMode) {
  auto value = [&](const std::string& run, const std::string& key) {
    std::string yaml = testing::ReadFile(dir_.path() + "/" + run + "/test_metrics.yaml");
    size_t at = yaml.find(key + ": ");
    return at == std::string::npos ? -1.0 : std::atof(yaml.c_str() + at + key.size() + 2);
  };
  int round = 0;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{},
        {"trainer.gradient_clip_val=0.5", "scheduler=cosine", "trainer.precision=bf16-mixed"}}) {
    const std::string eager_run = "eager" + std::to_string(round),
                      graph_run = "graphs" + std::to_string(round),
                      resumed_run = "resumed" + std::to_string(round);
    ++round;
    std::vector<std::string> eager_args = {"trainer.accelerator=cuda", "seed=11"}, graph_args;
    eager_args.insert(eager_args.end(), extra.begin(), extra.end());
    graph_args = eager_args;
    graph_args.push_back("trainer.cuda_graphs=true");
    auto eager = Train(eager_run, eager_args);
    ASSERT_EQ(eager.exit_code, 0) << eager.err;
    auto graphs = Train(graph_run, graph_args);
    ASSERT_EQ(graphs.exit_code, 0) << graphs.err;
    EXPECT_NE(
        graphs.err.find("trainer.cuda_graphs: the training step captured after 3 warm-up steps"),
        std::string::npos)
        << graphs.err;
    EXPECT_NEAR(value(graph_run, "test/loss"), value(eager_run, "test/loss"), 0.01) << graphs.err;
    EXPECT_NEAR(Accuracy(graph_run), Accuracy(eager_run), 0.02) << graphs.err;
    EXPECT_GE(Accuracy(graph_run), 0.9) << graphs.err;
    // Its checkpoint resumes without graphs (the optimizer's step counts kept on the host too).
    auto resumed = Train(resumed_run,
                         {"trainer.accelerator=cuda", "trainer.max_epochs=4",
                          "ckpt_path=" + dir_.path() + "/" + graph_run + "/checkpoints/last.ckpt"});
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_GE(Accuracy(resumed_run), 0.9) << resumed.err;
  }
  auto half = Train("half", {"trainer.accelerator=cuda", "trainer.cuda_graphs=true",
                             "trainer.precision=16-mixed"});
  EXPECT_NE(half.exit_code, 0);
  EXPECT_NE(half.err.find("trainer.cuda_graphs=true does not capture 16-mixed"), std::string::npos)
      << half.err;
  auto sgd =
      Train("sgd", {"trainer.accelerator=cuda", "trainer.cuda_graphs=true", "optimizer=sgd"});
  EXPECT_NE(sgd.exit_code, 0);
  EXPECT_NE(sgd.err.find(
                "trainer.cuda_graphs=true needs an optimizer whose step runs on the device alone"),
            std::string::npos)
      << sgd.err;
}

// Two processes share one GPU over Gloo; NCCL, which needs a GPU per process, is refused in one
// line where there are fewer GPUs than processes, and trains where there are enough.
TEST_F(CudaTest, DataParallelOnTheGpu) {
  auto gloo = Train("gloo", {"trainer.accelerator=cuda", "trainer.devices=2",
                             "trainer.process_group_backend=gloo"});
  ASSERT_EQ(gloo.exit_code, 0) << gloo.err;
  EXPECT_GE(Accuracy("gloo"), 0.9) << gloo.err;
  auto nccl = Train("nccl", {"trainer.accelerator=cuda", "trainer.devices=2",
                             "trainer.process_group_backend=nccl"});
  if (torch::cuda::device_count() >= 2) {
    ASSERT_EQ(nccl.exit_code, 0) << nccl.err;
    EXPECT_GE(Accuracy("nccl"), 0.9) << nccl.err;
  } else {
    EXPECT_NE(nccl.exit_code, 0);
    EXPECT_NE(nccl.err.find("process_group_backend=nccl needs a GPU per process: 2 processes on "
                            "this machine, 1 GPU"),
              std::string::npos)
        << nccl.err;
  }
}

// trainer.strategy=fsdp on the GPU (issue 55): one process shards over a world of one (the
// gathers and reductions on the device, no collective), its sharded checkpoint resumes, and with
// two GPUs two processes shard over NCCL.
TEST_F(CudaTest, FullyShardedTrainsAndResumesOnTheGpu) {
  const std::vector<std::string> fsdp = {"trainer.accelerator=cuda", "trainer.strategy=fsdp",
                                         "trainer.fsdp_auto_wrap_policy=none"};
  std::vector<std::string> first = fsdp;
  first.push_back("trainer.max_epochs=2");
  auto two_epochs = Train("fsdp", first);
  ASSERT_EQ(two_epochs.exit_code, 0) << two_epochs.err;
  std::vector<std::string> again = fsdp;
  again.push_back("ckpt_path=last");
  auto resumed = Train("fsdp", again);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const std::string log = testing::ReadFile(dir_.path() + "/fsdp/train.log");
  EXPECT_NE(log.find("fsdp: FULL_SHARD over 1 rank(s), 0 units and the root"), std::string::npos)
      << log;
  EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
  EXPECT_TRUE(FileExists(dir_.path() + "/fsdp/checkpoints/last.ckpt/meta.json"));
  EXPECT_GE(Accuracy("fsdp"), 0.9) << resumed.err;
  if (torch::cuda::device_count() < 2) return;
  std::vector<std::string> nccl = fsdp;
  nccl.insert(nccl.end(), {"trainer.devices=2", "trainer.process_group_backend=nccl"});
  auto sharded = Train("nccl", nccl);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  EXPECT_NE(testing::ReadFile(dir_.path() + "/nccl/train.log")
                .find("fsdp: FULL_SHARD over 2 rank(s) (nccl)"),
            std::string::npos);
  EXPECT_GE(Accuracy("nccl"), 0.9) << sharded.err;
}

// trainer.fsdp_cpu_offload on the GPU: between steps the pieces, their gradients and the AdamW
// state are in pinned host memory and the optimizer steps there; the units are copied to the GPU
// to compute. The run learns as the one without offload (the optimizer's float32 arithmetic on the
// CPU and the GPU differ in the last bits), and so does fp16-mixed, whose scaler checks the
// gradients on the CPU.
TEST_F(CudaTest, FullyShardedOffloadsToTheCpu) {
  const std::vector<std::string> fsdp = {"trainer.accelerator=cuda", "trainer.strategy=fsdp",
                                         "trainer.fsdp_auto_wrap_policy=none"};
  auto plain = Train("plain", fsdp);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::vector<std::string> offload = fsdp;
  offload.push_back("trainer.fsdp_cpu_offload=true");
  auto offloaded = Train("offload", offload);
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  EXPECT_NE(testing::ReadFile(dir_.path() + "/offload/train.log")
                .find("cpu offload: the pieces, their gradients and the optimizer state are in "
                      "the CPU's memory"),
            std::string::npos);
  EXPECT_GE(Accuracy("offload"), 0.9) << offloaded.err;
  EXPECT_NEAR(Accuracy("offload"), Accuracy("plain"), 0.02);
  // Resumed from its own checkpoint (pieces and optimizer state written from the CPU).
  std::vector<std::string> again = offload;
  again.insert(again.end(), {"ckpt_path=last", "trainer.max_epochs=4"});
  auto resumed = Train("offload", again);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_GE(Accuracy("offload"), 0.9) << resumed.err;
  std::vector<std::string> fp16 = offload;
  fp16.push_back("trainer.precision=16-mixed");
  auto half = Train("fp16", fp16);
  ASSERT_EQ(half.exit_code, 0) << half.err;
  EXPECT_GE(Accuracy("fp16"), 0.9) << half.err;
}

}  // namespace
}  // namespace kiln
