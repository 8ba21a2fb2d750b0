// Plugins as a user meets them, through the real `kiln` binary: found by --plugin, the
// `plugins:` key and KILN_PLUGIN_PATH; their config folders on the search path; their
// components in `kiln list` with the plugin as origin and usable from configs; and every way a
// plugin is refused ending in one line and exit code 2.

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::ProcessResult;
using testing::RunProcess;
using testing::TempDir;

std::string TestPlugin(const std::string& name) {
  return std::string(TEST_PLUGIN_DIR) + "/lib" + name + ".so";
}
std::string ExamplePlugin(const std::string& name) {
  return std::string(EXAMPLE_PLUGIN_DIR) + "/lib" + name + ".so";
}

void Copy(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
}

// A copy of the reverse_launcher test plugin, with its config folder, in `dir`.
void CopyReverseLauncher(const TempDir& tmp, const std::string& dir, const std::string& file) {
  tmp.Write(dir + "/reverse_launcher-configs/extra/from_plugin.yaml", "origin: copy\n");
  Copy(TestPlugin("reverse_launcher"), tmp.path() + "/" + dir + "/" + file);
}

int Lines(const std::string& text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  return static_cast<int>(lines.size());
}

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_.Write("conf/train.yaml", "defaults:\n  - _self_\nx: 1\n"); }

  ProcessResult Kiln(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), KILN_BINARY);
    env.emplace("KILN_PLUGIN_PATH", "");
    return RunProcess(args, env, dir_.path());
  }

  std::string conf() const { return dir_.path() + "/conf"; }

  // One line on stderr that contains `text`, exit code 2.
  void ExpectRefused(const ProcessResult& r, const std::string& text) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, text)) << r.err;
  }

  TempDir dir_;
};

TEST_F(PluginTest, ListShowsPluginComponentsWithTheirOrigin) {
  auto r = Kiln({"list", "launcher", "--plugin", TestPlugin("reverse_launcher")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "  basic  [built-in]")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "  reverse  [plugin reverse_launcher 1.0.0 (" +
                                           TestPlugin("reverse_launcher") +
                                           ")]  Runs the jobs last to first"))
      << r.out;
}

TEST_F(PluginTest, ConfigFolderJoinsTheSearchPathWithoutLoadingTheLibrary) {
  auto r = Kiln({"compose", "--config-path", conf(), "--cfg", "job", "--plugin",
                 TestPlugin("reverse_launcher"), "+extra=from_plugin"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "x: 1\nextra:\n  origin: reverse_launcher plugin\n");
  auto info = Kiln({"compose", "--config-path", conf(), "--info", "searchpath", "--plugin",
                    TestPlugin("reverse_launcher")});
  EXPECT_TRUE(absl::StrContains(info.out, "provider=plugin reverse_launcher, path=file://"))
      << info.out;
  // Without the plugin there is no such group, so Hydra's grammar reads a plain value.
  auto without = Kiln({"compose", "--config-path", conf(), "--cfg", "job", "+extra=from_plugin"});
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(without.out, "x: 1\nextra: from_plugin\n");
}

TEST_F(PluginTest, PluginLauncherRunsAMultirun) {
  auto r = Kiln({"compose", "-m", "--config-path", conf(), "--plugin",
                 TestPlugin("reverse_launcher"), "hydra.launcher._target_=reverse",
                 "hydra.sweep.dir=" + dir_.path() + "/sweep", "x=1,2,3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "x: 3\nx: 2\nx: 1\n");
}

// A plugin's resolver and sweeper, used from a config: the sweeper (in the plugin's config
// folder as hydra/sweeper/doubling) asks for one job at a time; each job resolves the plugin's
// resolver; the sweep machinery keeps the folder, ledger and summary as for the grid.
TEST_F(PluginTest, PluginResolverAndSweeperRunFromAConfig) {
  dir_.Write("conf/doubling.yaml",
             "defaults:\n  - override hydra/sweeper: doubling\n  - _self_\nx: 1\ntwice: "
             "${sweep_tools.twice:${x}}\n");
  const std::string plugin = TestPlugin("sweep_tools");
  const std::string sweep = dir_.path() + "/sweep";
  auto resolved = Kiln({"compose", "--config-path", conf(), "--config-name", "doubling", "--plugin",
                        plugin, "--cfg", "job", "--resolve", "x=21"});
  ASSERT_EQ(resolved.exit_code, 0) << resolved.err;
  EXPECT_EQ(resolved.out, "x: 21\ntwice: 42\n");

  auto list = Kiln({"list", "sweeper", "--plugin", plugin});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "  basic  [built-in]")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "  doubling  [plugin sweep_tools 1.0.0")) << list.out;

  auto plan = Kiln({"compose", "-m", "--dry-run", "--config-path", conf(), "--config-name",
                    "doubling", "--plugin", plugin, "hydra.sweeper.start=3"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(plan.out, "x=3\nx=6\nx=12\n");

  auto r = Kiln({"compose", "-m", "--config-path", conf(), "--config-name", "doubling", "--plugin",
                 plugin, "hydra.sweep.dir=" + sweep});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "x: 1\ntwice: 2\nx: 2\ntwice: 4\nx: 4\ntwice: 8\n");
  for (int job = 0; job < 3; ++job) {
    std::ifstream overrides(sweep + "/" + std::to_string(job) + "/.hydra/overrides.yaml");
    std::string text((std::istreambuf_iterator<char>(overrides)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "- x=" + std::to_string(1 << job) + "\n") << "job " << job;
  }
  std::ifstream summary(sweep + "/summary.csv");
  std::string csv((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  EXPECT_EQ(Lines(csv), 4) << csv;  // header and three jobs
  EXPECT_TRUE(absl::StrContains(csv, "2,ok,")) << csv;

  // Run again into the same folder: every job is in the ledger, none runs again.
  auto again = Kiln({"compose", "-m", "--config-path", conf(), "--config-name", "doubling",
                     "--plugin", plugin, "hydra.sweep.dir=" + sweep});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "");
  EXPECT_TRUE(absl::StrContains(again.err, "1 of 1 jobs are done, running 0")) << again.err;

  // The sweeper's options are declared once and checked like any component's.
  ExpectRefused(Kiln({"compose", "-m", "--config-path", conf(), "--config-name", "doubling",
                      "--plugin", plugin, "hydra.sweep.dir=" + sweep, "hydra.sweeper.start=0"}),
                "option 'hydra.sweeper.start' of sweeper 'doubling' must be at least 1, got 0");
}

TEST_F(PluginTest, ASecondRegistrationOfAResolverIsRefused) {
  ExpectRefused(
      Kiln({"list", "--plugin", TestPlugin("clashing_resolver_plugin")}),
      "registers config resolver 'oc.env', which built-in already provides: give it another name");
}

TEST_F(PluginTest, PluginsKeyInThePrimaryConfigAndOnTheCommandLine) {
  dir_.Write("conf/with_plugins.yaml", "plugins: [" + TestPlugin("reverse_launcher") + "]\ny: 2\n");
  auto r = Kiln({"compose", "--config-path", conf(), "--config-name", "with_plugins", "--cfg",
                 "job", "+extra=from_plugin"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "origin: reverse_launcher plugin")) << r.out;
  auto override = Kiln({"compose", "--config-path", conf(), "--cfg", "job",
                        "+plugins=[" + TestPlugin("reverse_launcher") + "]", "+extra=from_plugin"});
  ASSERT_EQ(override.exit_code, 0) << override.err;
  // A bare name means an installed plugin (<prefix>/lib/kiln/plugins; the build tree's examples).
  auto installed = Kiln({"compose", "--config-path", conf(), "--cfg", "job",
                         "+plugins=[tiny_convnet]", "+model=tiny_convnet", "+task.num_classes=3"});
  ASSERT_EQ(installed.exit_code, 0) << installed.err;
  EXPECT_TRUE(absl::StrContains(installed.out, "_target_: tiny_convnet")) << installed.out;
  ExpectRefused(
      Kiln({"compose", "--config-path", conf(), "--cfg", "job", "+plugins=[no_such_plugin]"}),
      "plugin 'no_such_plugin' is neither a path nor installed");
  ExpectRefused(Kiln({"compose", "--config-path", conf(), "--cfg", "job", "+plugins=[[1]]"}),
                "'plugins' (override +plugins=[[1]]) must list plugin paths or names");
}

TEST_F(PluginTest, KilnPluginPathLoadsEveryPluginInAFolder) {
  dir_.Write("plugins/README", "not a library\n");
  CopyReverseLauncher(dir_, "plugins", "libreverse_launcher.so");
  Copy(TestPlugin("not_a_plugin"), dir_.path() + "/plugins/libnot_a_plugin.so");
  auto r = Kiln(
      {"list", "launcher"},
      {{"KILN_PLUGIN_PATH", "/nonexistent-but-empty-is-skipped::" + dir_.path() + "/plugins"}});
  ExpectRefused(r,
                "KILN_PLUGIN_PATH names '/nonexistent-but-empty-is-skipped', which does not exist");
  r = Kiln({"list", "launcher"}, {{"KILN_PLUGIN_PATH", dir_.path() + "/plugins"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "  reverse  [plugin reverse_launcher 1.0.0")) << r.out;
}

TEST_F(PluginTest, ExamplePluginsTrainFromConfig) {
  auto r = Kiln({"train", "--plugin", ExamplePlugin("gaussian_blobs"), "--plugin",
                 ExamplePlugin("grad_norm_monitor"), "experiment=blobs", "callbacks=grad_norm",
                 "callbacks.model_checkpoint=null", "callbacks.early_stopping=null",
                 "callbacks.grad_norm_monitor.every_n_steps=5", "trainer.num_threads=1",
                 "hydra.run.dir=" + dir_.path() + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string metrics = testing::ReadFile(dir_.path() + "/run/test_metrics.yaml");
  size_t at = metrics.find("test/acc: ");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GT(std::atof(metrics.c_str() + at + 10), 0.95) << metrics;
  // 3 epochs x 63 steps, one row every 5 steps.
  std::string norms = testing::ReadFile(dir_.path() + "/run/grad_norms.csv");
  EXPECT_EQ(Lines(norms), 1 + 189 / 5) << norms;
  EXPECT_TRUE(absl::StartsWith(norms, "step,grad_norm\n5,")) << norms;
}

// The example plugins declare their options through OptionBinding: a bad value is refused in the
// registry's one format before anything is built.
TEST_F(PluginTest, ExamplePluginOptionsAreCheckedByTheirDeclaration) {
  ExpectRefused(Kiln({"train", "--plugin", ExamplePlugin("gaussian_blobs"), "experiment=blobs",
                      "data.batch_size=0", "hydra.run.dir=" + dir_.path() + "/run"}),
                "option 'data.batch_size' of datamodule 'gaussian_blobs' must be at least 1, got 0 "
                "(set at command line 'data.batch_size=0')");
  ExpectRefused(
      Kiln({"train", "--plugin", ExamplePlugin("gaussian_blobs"), "--plugin",
            ExamplePlugin("grad_norm_monitor"), "experiment=blobs", "callbacks=grad_norm",
            "callbacks.grad_norm_monitor.every_n_steps=0",
            "hydra.run.dir=" + dir_.path() + "/run"}),
      "option 'callbacks.grad_norm_monitor.every_n_steps' of callback 'grad_norm_monitor' "
      "must be at least 1, got 0");
  auto listed = Kiln({"list", "model", "--plugin", ExamplePlugin("tiny_convnet")});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, "width")) << listed.out;
}

// A plugin's metric, added to a task's metrics from the command line: logged at validation and
// test time like the built-in ones.
TEST_F(PluginTest, PluginMetricIsUsedFromTheConfig) {
  auto r = Kiln({"train", "--plugin", ExamplePlugin("gaussian_blobs"), "--plugin",
                 TestPlugin("metric_tools"), "experiment=blobs",
                 "+task.metrics.err={_target_: error_rate}", "trainer.max_epochs=1",
                 "trainer.num_threads=1", "hydra.run.dir=" + dir_.path() + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string metrics = testing::ReadFile(dir_.path() + "/run/test_metrics.yaml");
  size_t acc = metrics.find("test/acc: "), err = metrics.find("test/err: ");
  ASSERT_NE(acc, std::string::npos) << metrics;
  ASSERT_NE(err, std::string::npos) << metrics;
  EXPECT_NEAR(std::atof(metrics.c_str() + err + 10), 1.0 - std::atof(metrics.c_str() + acc + 10),
              1e-12)
      << metrics;
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(dir_.path() + "/run/metrics.csv"), "val/err"))
      << metrics;
  auto list = Kiln({"list", "metric", "--plugin", TestPlugin("metric_tools")});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "  error_rate  [plugin metric_tools 1.0.0")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "  accuracy  [built-in]")) << list.out;
}

TEST_F(PluginTest, MissingFile) {
  ExpectRefused(
      Kiln({"compose", "--config-path", conf(), "--plugin", dir_.path() + "/libnothing.so"}),
      "/libnothing.so': no such file");
}

TEST_F(PluginTest, NotAKilnPlugin) {
  ExpectRefused(Kiln({"list", "--plugin", TestPlugin("not_a_plugin")}),
                "is not a kiln plugin: it has no .kiln_plugin manifest");
  dir_.Write("libtext.so", "just text\n");
  ExpectRefused(Kiln({"list", "--plugin", dir_.path() + "/libtext.so"}),
                "is not a kiln plugin: not a 64-bit ELF shared library");
}

TEST_F(PluginTest, BuiltForAnotherAbi) {
  ExpectRefused(
      Kiln({"compose", "--config-path", conf(), "--plugin", TestPlugin("other_abi_plugin")}),
      "plugin 'other_abi_plugin' (" + TestPlugin("other_abi_plugin") +
          ") was built for plugin ABI 99; this kiln loads ABI 6");
}

TEST_F(PluginTest, BuiltAgainstAnotherKiln) {
  ExpectRefused(Kiln({"train", "--cfg", "job", "--plugin", TestPlugin("other_kiln_plugin")}),
                "plugin 'other_kiln_plugin' (" + TestPlugin("other_kiln_plugin") +
                    ") was built against kiln 0.0.9; this is kiln 0.1.0: rebuild the plugin");
}

TEST_F(PluginTest, BuiltAgainstAnotherLibTorch) {
  ExpectRefused(Kiln({"list", "--plugin", TestPlugin("other_torch_plugin")}),
                "was built against LibTorch 0.4.1; this kiln uses LibTorch");
}

TEST_F(PluginTest, RegistersANameThatExists) {
  ExpectRefused(Kiln({"list", "--plugin", TestPlugin("clashing_plugin")}),
                "plugin 'clashing_plugin' (" + TestPlugin("clashing_plugin") +
                    ") registers launcher 'basic', which built-in already provides");
}

TEST_F(PluginTest, TwoPluginsWithOneName) {
  CopyReverseLauncher(dir_, "copy", "libcopy.so");
  ExpectRefused(Kiln({"list", "--plugin", TestPlugin("reverse_launcher"), "--plugin",
                      dir_.path() + "/copy/libcopy.so"}),
                "two plugins are named 'reverse_launcher'");
}

TEST_F(PluginTest, ConfigFolderMissing) {
  ExpectRefused(
      Kiln({"compose", "--config-path", conf(), "--plugin", TestPlugin("missing_configs_plugin")}),
      "its config folder " + std::string(TEST_PLUGIN_DIR) + "/no-such-configs does not exist");
}

TEST_F(PluginTest, ComponentsDocIsUpToDate) {
  auto r = Kiln({"list", "--markdown"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == testing::ReadFile(std::string(KILN_SOURCE_DIR) + "/docs/components.md"))
      << "docs/components.md is stale: run scripts/gen_components_doc.sh";
}

}  // namespace
}  // namespace kiln
