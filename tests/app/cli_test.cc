// Runs the real `kiln` binary in a scratch directory and checks what a user sees and gets:
// printed configs, run directories, multirun layout, flags, and one-line errors with exit 2.
#include <dirent.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/config/node.h"
#include "lib/config/yaml_io.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("conf/train.yaml",
               "defaults:\n  - model: cnn\n  - _self_\nseed: 7\ntrainer:\n  max_epochs: 3\n"
               "run_name: ${model.name}_${seed}\n");
    dir_.Write("conf/model/cnn.yaml", "name: cnn\nchannels: [32, 64]\n");
    dir_.Write("conf/model/mlp.yaml", "name: mlp\nhidden: 128\n");
    dir_.Write("conf/optimizer/sgd.yaml", "lr: 0.1\n");
  }

  ProcessResult Kiln(std::vector<std::string> args) {
    std::vector<std::string> argv = {KILN_BINARY};
    bool has_command = false;
    for (auto& a : args) {
      argv.push_back(a);
      if (!has_command && (a == "train" || a == "compose")) {
        argv.push_back("--config-path");
        argv.push_back(dir_.path() + "/conf");
        has_command = true;
      }
    }
    return RunProcess(argv, {}, dir_.path());
  }

  static config::NodePtr Yaml(const std::string& text) {
    auto node = config::ParseYaml(text, "<output>");
    EXPECT_TRUE(node.ok()) << node.status() << "\n" << text;
    return node.ok() ? *node : config::Node::Null();
  }

  std::string OnlyChild(const std::string& dir) {
    auto names = List(dir);
    EXPECT_EQ(names.size(), 1u) << dir;
    return names.empty() ? "" : dir + "/" + names[0];
  }

  TempDir dir_;
};

TEST_F(CliTest, CfgJobPrintsTheComposedConfigAndRunsNothing) {
  auto r = Kiln({"train", "--cfg", "job", "model=mlp", "trainer.max_epochs=5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cfg = Yaml(r.out);
  EXPECT_EQ(cfg->Find("model")->Find("name")->as_string(), "mlp");
  EXPECT_EQ(cfg->Find("trainer")->Find("max_epochs")->as_int(), 5);
  EXPECT_EQ(cfg->Find("run_name")->as_string(), "${model.name}_${seed}");
  EXPECT_FALSE(FileExists(dir_.path() + "/outputs"));
}

TEST_F(CliTest, ResolvePrintsResolvedValues) {
  auto r = Kiln({"train", "--cfg", "job", "--resolve"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Yaml(r.out)->Find("run_name")->as_string(), "cnn_7");
}

TEST_F(CliTest, PackageSelectsASubtree) {
  auto r = Kiln({"train", "--cfg", "job", "--package", "model"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cfg = Yaml(r.out);
  EXPECT_EQ(cfg->Find("name")->as_string(), "cnn");
  EXPECT_EQ(cfg->Find("seed"), nullptr);
}

TEST_F(CliTest, CfgHydraShowsRunDirAndChoices) {
  auto r = Kiln({"train", "--cfg", "hydra", "model=mlp"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto hydra = Yaml(r.out)->Find("hydra");
  ASSERT_NE(hydra, nullptr);
  EXPECT_TRUE(absl::StartsWith(hydra->Find("run")->Find("dir")->as_string(), "outputs/"));
  EXPECT_EQ(hydra->Find("runtime")->Find("choices")->Find("model")->as_string(), "mlp");
  EXPECT_EQ(hydra->Find("overrides")->Find("task")->items()[0]->as_string(), "model=mlp");
}

TEST_F(CliTest, RunWritesHydraRunDirectoryWithoutChangingWorkingDirectory) {
  auto r = Kiln({"compose", "seed=11"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string day = OnlyChild(dir_.path() + "/outputs");
  std::string run = OnlyChild(day);
  EXPECT_EQ(List(run), (std::vector<std::string>{".hydra", "compose.log"}));
  EXPECT_EQ(List(run + "/.hydra"),
            (std::vector<std::string>{"config.yaml", "hydra.yaml", "overrides.yaml"}));
  auto cfg = Yaml(ReadFile(run + "/.hydra/config.yaml"));
  EXPECT_EQ(cfg->Find("seed")->as_int(), 11);
  EXPECT_EQ(cfg->Find("run_name")->as_string(), "${model.name}_${seed}");  // recorded unresolved
  auto overrides = Yaml(ReadFile(run + "/.hydra/overrides.yaml"));
  ASSERT_EQ(overrides->size(), 1u);
  EXPECT_EQ(overrides->items()[0]->as_string(), "seed=11");
  auto hydra = Yaml(ReadFile(run + "/.hydra/hydra.yaml"))->Find("hydra");
  std::string relative = run.substr(dir_.path().size() + 1);
  EXPECT_EQ(hydra->Find("runtime")->Find("output_dir")->as_string(), relative);
  EXPECT_EQ(hydra->Find("runtime")->Find("cwd")->as_string(), dir_.path());
  EXPECT_NE(ReadFile(run + "/compose.log").find("config recorded in " + relative),
            std::string::npos);
  // The job's printed (resolved) config goes to stdout.
  EXPECT_EQ(Yaml(r.out)->Find("run_name")->as_string(), "cnn_11");
}

TEST_F(CliTest, RunDirAndJobNameAreOverridable) {
  auto r = Kiln({"compose", "hydra.run.dir=custom/here", "hydra.job.name=exp1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(FileExists(dir_.path() + "/custom/here/.hydra/config.yaml"));
  EXPECT_TRUE(FileExists(dir_.path() + "/custom/here/exp1.log"));
  EXPECT_FALSE(FileExists(dir_.path() + "/outputs"));
}

TEST_F(CliTest, MultirunDryRunPrintsJobsInLaunchOrder) {
  auto r = Kiln({"train", "-m", "--dry-run", "model=cnn,mlp", "seed=range(1,3)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "model=cnn seed=1\nmodel=cnn seed=2\nmodel=mlp seed=1\nmodel=mlp seed=2\n");
  EXPECT_FALSE(FileExists(dir_.path() + "/multirun"));
}

TEST_F(CliTest, SweeperParamsFromTheConfigComeBeforeTheCommandLine) {
  dir_.Write("conf/sweep.yaml",
             "defaults:\n  - model: cnn\n  - _self_\nseed: 1\nhydra:\n  sweeper:\n    params:\n"
             "      seed: 1,2\n      model: cnn\n");
  auto r = Kiln({"train", "--config-name", "sweep", "-m", "--dry-run", "model=mlp"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "seed=1 model=mlp\nseed=2 model=mlp\n");
}

TEST_F(CliTest, MultirunGlobSweepsGroupOptions) {
  auto r = Kiln({"train", "-m", "--dry-run", "model=glob(*)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "model=cnn\nmodel=mlp\n");
}

TEST_F(CliTest, MultirunWritesOneNumberedDirectoryPerJob) {
  auto r = Kiln({"compose", "-m", "model=cnn,mlp", "hydra.sweep.dir=sweep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // .kiln.lock: the sweep's lock (docs/reliability.md), free once the sweep ended.
  EXPECT_EQ(List(dir_.path() + "/sweep"),
            (std::vector<std::string>{".kiln.lock", "0", "1", "ledger.yaml", "multirun.yaml",
                                      "summary.csv"}));
  for (auto [num, model] : {std::pair<const char*, const char*>{"0", "cnn"}, {"1", "mlp"}}) {
    std::string job = dir_.path() + "/sweep/" + num;
    auto cfg = Yaml(ReadFile(job + "/.hydra/config.yaml"));
    EXPECT_EQ(cfg->Find("model")->Find("name")->as_string(), model);
    auto hydra = Yaml(ReadFile(job + "/.hydra/hydra.yaml"))->Find("hydra");
    EXPECT_EQ(hydra->Find("job")->Find("num")->as_int(), std::stoi(num));
    EXPECT_EQ(hydra->Find("mode")->as_string(), "MULTIRUN");
  }
}

TEST_F(CliTest, SweepSubdirCanUseOverrideDirname) {
  auto r = Kiln({"compose", "-m", "seed=1,2", "hydra.sweep.dir=s",
                 "hydra.sweep.subdir=${hydra.job.override_dirname}"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(List(dir_.path() + "/s"),
            (std::vector<std::string>{".kiln.lock", "ledger.yaml", "multirun.yaml", "seed=1",
                                      "seed=2", "summary.csv"}));
}

TEST_F(CliTest, HelpListsGroupsOptionsAndConfig) {
  auto r = Kiln({"train", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model: cnn, mlp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer: sgd"), std::string::npos);
  EXPECT_NE(r.out.find("max_epochs: 3"), std::string::npos);
}

TEST_F(CliTest, InfoProvenanceNamesFileLineAndOverride) {
  auto r = Kiln({"train", "--info", "provenance", "seed=9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n');
  auto line_of = [&](const std::string& prefix) {
    for (const auto& l : lines) {
      if (absl::StartsWith(l, prefix)) return l;
    }
    return std::string();
  };
  EXPECT_NE(line_of("seed: 9").find("command line 'seed=9'"), std::string::npos) << r.out;
  EXPECT_NE(line_of("trainer.max_epochs: 3").find("conf/train.yaml:6"), std::string::npos) << r.out;
  EXPECT_NE(line_of("model.channels.1: 64").find("conf/model/cnn.yaml:2"), std::string::npos)
      << r.out;
}

TEST_F(CliTest, InfoShowsDefaultsTreeAndSearchPath) {
  auto r = Kiln({"train", "--info", "defaults-tree"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  model: cnn"), std::string::npos) << r.out;
  r = Kiln({"train", "--info", "searchpath"});
  EXPECT_NE(r.out.find("provider=main, path=file://" + dir_.path() + "/conf"), std::string::npos)
      << r.out;
}

TEST_F(CliTest, ListShowsRegisteredComponents) {
  auto r = Kiln({"list", "launcher"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("basic  [built-in]"), std::string::npos) << r.out;
}

TEST_F(CliTest, ListLoadsTheLibTorchComponentsWithTheirOptions) {
#if !KILN_HAS_COMPONENTS
  GTEST_SKIP() << "built without LibTorch";
#endif
  auto r = Kiln({"list", "model"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cnn  [built-in]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("channels: list = [32, 64]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_classes: int = (required)"), std::string::npos) << r.out;
}

// A mistyped command lists the same commands as `kiln --help`: one list.
TEST_F(CliTest, AMistypedCommandListsEveryCommandThatHelpLists) {
  auto help = Kiln({"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  std::vector<std::string> commands;
  bool in_commands = false;
  for (absl::string_view line : absl::StrSplit(help.out, '\n')) {
    if (line == "commands:") {
      in_commands = true;
    } else if (in_commands && absl::StartsWith(line, "  ")) {
      std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
      commands.push_back(words[0]);
    } else if (in_commands) {
      break;
    }
  }
  ASSERT_GE(commands.size(), 13u) << help.out;
  auto r = Kiln({"trian"});
  EXPECT_EQ(r.exit_code, 2);
  size_t list = r.err.find("; commands: ");
  ASSERT_NE(list, std::string::npos) << r.err;
  std::string listed = r.err.substr(list + 12, r.err.find('\n', list) - list - 12);
  EXPECT_EQ(listed, absl::StrJoin(commands, ", ")) << r.err;
}

struct BadInput {
  std::string name;
  std::vector<std::string> args;
  std::string file;  // written under conf/ before running, when not empty
  std::string contents;
  std::vector<std::string> mentions;
};

void PrintTo(const BadInput& bad, std::ostream* os) { *os << bad.name; }

class CliBadInputTest : public CliTest, public ::testing::WithParamInterface<BadInput> {};

TEST_P(CliBadInputTest, OneLineExitTwoNoOutputs) {
  const BadInput& bad = GetParam();
  if (!bad.file.empty()) dir_.Write("conf/" + bad.file, bad.contents);
  auto r = Kiln(bad.args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "kiln: error: ")) << r.err;
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos);
  for (const auto& m : bad.mentions)
    EXPECT_NE(r.err.find(m), std::string::npos) << "'" << m << "' not in: " << r.err;
  EXPECT_FALSE(FileExists(dir_.path() + "/outputs"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInputTest,
    ::testing::Values(
        BadInput{"MalformedYaml",
                 {"train", "--cfg", "job"},
                 "train.yaml",
                 "a: [1, 2\nb: 3\n",
                 {"conf/train.yaml:2:"}},
        BadInput{"UnknownKey",
                 {"compose", "trainer.max_epoch=3"},
                 "",
                 "",
                 {"trainer.max_epoch", "did you mean 'trainer.max_epochs'"}},
        BadInput{
            "UnknownOption", {"compose", "model=transfomer"}, "", "", {"transfomer", "cnn, mlp"}},
        BadInput{
            "UnknownGroup", {"compose", "modle=cnn"}, "", "", {"modle", "did you mean 'model'"}},
        BadInput{"BadOverrideSyntax", {"compose", "seed=[1,2"}, "", "", {"seed=[1,2", "column"}},
        BadInput{
            "SweepWithoutMultirun", {"compose", "seed=1,2"}, "", "", {"Ambiguous", "--multirun"}},
        BadInput{"InterpolationToMissingKey",
                 {"compose"},
                 "model/cnn.yaml",
                 "name: ${nope.x}\n",
                 {"nope.x"}},
        BadInput{
            "InterpolationCycle", {"compose"}, "model/cnn.yaml", "a: ${.b}\nb: ${.a}\n", {"cycle"}},
        BadInput{"InterpolationToMandatoryValue",
                 {"compose"},
                 "model/cnn.yaml",
                 "depth: ???\nlayers: ${.depth}\n",
                 {"model.depth", "???"}},
        BadInput{"UnknownConfigName",
                 {"train", "--cfg", "job", "--config-name", "trian"},
                 "",
                 "",
                 {"trian", "did you mean 'train'"}},
        BadInput{
            "UnknownFlag", {"train", "--cfgg", "job"}, "", "", {"--cfgg", "did you mean '--cfg'"}},
        BadInput{"UnknownCommand", {"trian"}, "", "", {"trian", "did you mean 'train'"}},
        BadInput{
            "BadCfgValue", {"train", "--cfg", "jobs"}, "", "", {"--cfg takes job, hydra or all"}},
        BadInput{"UnknownComponentKind", {"list", "modle"}, "", "", {"modle"}},
        BadInput{"DuplicateGroupInDefaults",
                 {"train", "--cfg", "job"},
                 "train.yaml",
                 "defaults:\n  - model: cnn\n  - model: mlp\n",
                 {"Multiple values for model"}},
        BadInput{"DuplicateSelf",
                 {"train", "--cfg", "job"},
                 "train.yaml",
                 "defaults:\n  - _self_\n  - _self_\n",
                 {"Duplicate _self_", "conf/train.yaml:3"}},
        BadInput{"DefaultsNotAList",
                 {"train", "--cfg", "job"},
                 "train.yaml",
                 "defaults: 3\n",
                 {"'defaults' must be a list"}},
        BadInput{"TopLevelNotAMapping",
                 {"train", "--cfg", "job"},
                 "train.yaml",
                 "- 1\n- 2\n",
                 {"mapping"}},
        BadInput{"IntervalInBasicSweeper",
                 {"train", "-m", "--dry-run", "seed=interval(0,1)"},
                 "",
                 "",
                 {"interval"}}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
