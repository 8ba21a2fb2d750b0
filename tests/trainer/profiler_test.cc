// trainer.profiler: simple's phases of every batch, advanced's Chrome trace of operators and its
// window of batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/models/model.h"
#include "components/vision/image_ops.h"
#include "lib/base/exit_code.h"
#include "lib/config/yaml_io.h"
#include "lib/data/datamodule.h"
#include "lib/data/shards/tar_shard.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/trainer.h"
#include "lib/tuner/lr_finder.h"
#include "lib/weights/checkpoint.h"
#include "tests/support/process.h"
#include "tests/trainer/fit_fixture.h"

namespace kiln {
namespace profiler_test {

using namespace fit_fixture;  // NOLINT

// trainer.profiler=simple counts every training batch's forward, backward and optimizer step
// and the waits for data, and splits the fit's time between them; the phases never add up to
// more than the fit took (each counts its own time only).
TEST(Profiler, SimpleTimesEveryPhaseOfEveryBatch) {
  testing::TempDir dir;
  RunResult run = Train(dir.path(), std::string(kThreeEpochs) + "profiler: simple\n", 0, "");
  ASSERT_TRUE(run.status.ok()) << run.status;
  const PhaseProfiler& p = run.profile;
  ASSERT_TRUE(p.enabled());
  for (auto phase : {PhaseProfiler::kData, PhaseProfiler::kForward, PhaseProfiler::kBackward,
                     PhaseProfiler::kOptimizer}) {
    EXPECT_EQ(p.calls(phase), 18) << PhaseProfiler::Name(phase);
    EXPECT_GT(p.seconds(phase), 0) << PhaseProfiler::Name(phase);
  }
  EXPECT_EQ(p.calls(PhaseProfiler::kValidation), 3);  // once per epoch
  EXPECT_GT(p.calls(PhaseProfiler::kLogging), 18);    // every step (log_every_n_steps: 1) and epoch
  double sum = 0;
  for (int phase = 0; phase < PhaseProfiler::kPhases; ++phase)
    sum += p.seconds(static_cast<PhaseProfiler::Phase>(phase));
  std::vector<std::string> table = p.Report(sum * 1.25);
  ASSERT_EQ(table.size(), 2 + 7 + 1u);  // header, 7 phases, other, fit
  EXPECT_NE(table[2].find("forward"), std::string::npos) << table[2];
  EXPECT_NE(table[8].find("other"), std::string::npos) << table[8];
  EXPECT_NE(table[8].find("20.0%"), std::string::npos) << table[8];
  // Off by default: nothing measured.
  testing::TempDir plain;
  RunResult off = Train(plain.path(), kThreeEpochs, 0, "");
  EXPECT_FALSE(off.profile.enabled());
  EXPECT_EQ(off.profile.calls(PhaseProfiler::kForward), 0);
}

// trainer.profiler=advanced writes LibTorch's operator profile of training batches 3-22 (the
// default window) as a Chrome trace: a JSON array of events with names, phases and timestamps,
// among them the model's
// linear layers, their backward and the optimizer's update.
TEST(Profiler, AdvancedWritesAChromeTraceOfOperators) {
  testing::TempDir dir;
  RunResult run = Train(dir.path(), std::string(kThreeEpochs) + "profiler: advanced\n", 0, "");
  ASSERT_TRUE(run.status.ok()) << run.status;
  const std::string path = dir.path() + "/profile.trace.json";
  ASSERT_TRUE(testing::FileExists(path));
  // JSON is YAML's flow style: yaml-cpp parses it (and fails on what JSON would refuse too:
  // unbalanced brackets, a missing comma between events).
  auto trace = config::ParseYaml(testing::ReadFile(path), path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_TRUE((*trace)->is_list());
  ASSERT_GT((*trace)->size(), 100u);
  std::set<std::string> names;
  for (const config::NodePtr& event : (*trace)->items()) {
    ASSERT_TRUE(event->is_map());
    ASSERT_NE(event->Find("name"), nullptr);
    ASSERT_NE(event->Find("ts"), nullptr);
    ASSERT_NE(event->Find("ph"), nullptr);
    names.insert(event->Find("name")->as_string());
    // Numbered as the Trace Event Format has it (LibTorch writes "CPU Functions"), and named.
    ASSERT_NE(event->Find("pid"), nullptr);
    EXPECT_EQ(event->Find("pid")->kind(), config::NodeKind::kInt);
    EXPECT_EQ(event->Find("pid")->as_int(), 1);
  }
  EXPECT_EQ(names.count("process_name"), 1u);
  EXPECT_EQ(names.count("thread_name"), 1u);
  EXPECT_EQ(names.count("aten::addmm"), 1u);  // the forward pass
  EXPECT_EQ(names.count("autograd::engine::evaluate_function: AddmmBackward0"),
            1u);                                      // the backward
  EXPECT_EQ(names.count("aten::_fused_adamw_"), 1u);  // AdamW's step (ATen's fused kernel)
}

// The advanced profiler's window (trainer.profiler_wait/_warmup/_active): 3 recorded batches hold
// exactly 3 AdamW updates (one _fused_adamw_ per step over the one parameter group), 1 batch
// exactly 1; a window past the end of training writes no trace.
TEST(Profiler, AdvancedRecordsTheConfiguredWindowOfBatches) {
  auto updates = [](const std::string& window) -> int64_t {
    testing::TempDir dir;
    RunResult run =
        Train(dir.path(), std::string(kThreeEpochs) + "profiler: advanced\n" + window, 0, "");
    EXPECT_TRUE(run.status.ok()) << run.status;
    const std::string path = dir.path() + "/profile.trace.json";
    if (!testing::FileExists(path)) return -1;
    auto trace = config::ParseYaml(testing::ReadFile(path), path);
    EXPECT_TRUE(trace.ok()) << trace.status();
    if (!trace.ok()) return -2;
    int64_t n = 0;
    for (const config::NodePtr& event : (*trace)->items())
      n += event->Find("name")->as_string() == "aten::_fused_adamw_";
    return n;
  };
  EXPECT_EQ(updates("profiler_wait: 2\nprofiler_warmup: 1\nprofiler_active: 3\n"), 3);
  EXPECT_EQ(updates("profiler_wait: 0\nprofiler_warmup: 0\nprofiler_active: 1\n"), 1);
  EXPECT_EQ(updates("profiler_wait: 10\nprofiler_warmup: 10\nprofiler_active: 1\n"),
            -1);  // 18 batches in all
}

}  // namespace profiler_test
}  // namespace kiln
