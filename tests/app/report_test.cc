// `kiln report` through the real binary, its page rendered in headless Chromium: runs, a grid sweep
// with a failed job, an Optuna sweep with pruned and failed trials, a truncated metrics file and a
// run still being written, written here as `kiln train` writes them; then the charts' series and
// point counts (and each sweep's parallel-coordinates axes), the runs table's rows and the page's
// errors are read back from the rendered DOM, and screenshots are left in the build tree. Bad input
// ends in one line and exit code 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;

constexpr char kHydraConfig[] =
    "seed: 7\noptimizer:\n  _target_: sgd\n  lr: 0.1\ntrainer:\n  max_epochs: 1\n";

// A finished run: 10 training steps, validation at steps 4 and 9, a test, a checkpoint.
void WriteFinishedRun(const TempDir& dir, const std::string& run, const std::string& lr) {
  dir.Write(run + "/.hydra/config.yaml",
            absl::StrCat("seed: 7\noptimizer:\n  _target_: sgd\n  lr: ", lr,
                         "\ntrainer:\n  max_epochs: 1\n"));
  dir.Write(run + "/.hydra/overrides.yaml", absl::StrCat("- optimizer.lr=", lr, "\n- seed=7\n"));
  std::string csv = "step,epoch,lr-SGD,train/loss,val/acc,val/loss\n";
  for (int s = 0; s < 10; ++s) {
    bool val = s == 4 || s == 9;
    absl::StrAppend(&csv, s, ",0,", lr, ",", 2.0 - 0.15 * s, ",",
                    val ? absl::StrCat(0.5 + 0.03 * s) : "", ",",
                    val ? absl::StrCat(1.5 - 0.1 * s) : "", "\n");
  }
  dir.Write(run + "/metrics.csv", csv);
  dir.Write(run + "/test_metrics.yaml", "test/acc: 0.81\ntest/loss: 0.55\n");
  dir.Write(run + "/test_confusion_matrix.csv",
            "true/predicted,cat,dog,bird\ncat,8,1,1\ndog,2,7,1\nbird,0,1,9\n");
  dir.Write(run + "/test_per_class_accuracy.csv",
            "class,support,correct,accuracy\ncat,10,8,0.8\ndog,10,7,0.7\nbird,10,9,0.9\n");
  dir.Write(run + "/train.log",
            "[2026-11-24 10:00:00,000][kiln][INFO] - start\n"
            "[2026-11-24 10:01:05,500][kiln][INFO] - fit done: 1 epochs, 10 optimizer steps, "
            "640 samples in 64.0 s\n");
  dir.Write(run + "/checkpoints/epoch=0-step=10.ckpt", "not really a checkpoint");
}

// Everything the bad-input cases need, under dir/outputs.
void WriteOutputs(const TempDir& dir) {
  WriteFinishedRun(dir, "outputs/run_a", "0.1");
  // A grid sweep of three jobs: two ran (one metrics file cut short mid-line), one failed early.
  dir.Write("outputs/grid/multirun.yaml", "hydra:\n  sweeper:\n    _target_: basic\n");
  dir.Write("outputs/grid/ledger.yaml",
            "- {job: 0, status: ok, seconds: 1.5, overrides: ['optimizer.lr=0.01'], dir: '" +
                dir.path() +
                "/outputs/grid/0', message: ''}\n"
                "- {job: 1, status: ok, seconds: 1.7, overrides: ['optimizer.lr=0.001'], dir: '" +
                dir.path() +
                "/outputs/grid/1', message: ''}\n"
                "- {job: 2, status: failed, seconds: 0.2, overrides: ['optimizer.lr=-1'], dir: '" +
                dir.path() + "/outputs/grid/2', message: 'option lr must be positive'}\n");
  WriteFinishedRun(dir, "outputs/grid/0", "0.01");
  WriteFinishedRun(dir, "outputs/grid/1", "0.001");
  std::string truncated = ReadFile(dir.path() + "/outputs/grid/1/metrics.csv");
  dir.Write("outputs/grid/1/metrics.csv", truncated + "10,0,0.0");  // a writer stopped mid-line
  dir.Write("outputs/grid/2/.hydra/config.yaml", kHydraConfig);
  dir.Write("outputs/grid/2/.hydra/overrides.yaml", "- optimizer.lr=-1\n");
  // A run still being written: config and a few metrics, no test yet.
  dir.Write("outputs/running/.hydra/config.yaml", kHydraConfig);
  dir.Write("outputs/running/metrics.csv", "step,train/loss\n0,2.5\n1,2.25\n2,2.0\n");
  // An Optuna sweep: 4 trials, one pruned, one failed.
  dir.Write("outputs/study/multirun.yaml",
            "hydra:\n  sweeper:\n    _target_: optuna\n    direction: maximize\n"
            "  overrides:\n    task: ['optimizer.lr=tag(log,interval(0.01,1))']\n");
  dir.Write("outputs/study/summary.csv",
            "trial,state,val/acc,seconds,optimizer.lr,dir\n"
            "0,COMPLETE,0.7,2.00,0.1," +
                dir.path() +
                "/outputs/study/0\n"
                "1,PRUNED,,1.00,0.5," +
                dir.path() +
                "/outputs/study/1\n"
                "2,COMPLETE,0.8,2.10,0.03," +
                dir.path() +
                "/outputs/study/2\n"
                "3,FAIL,,0.10,0.9," +
                dir.path() + "/outputs/study/3\n");
  WriteFinishedRun(dir, "outputs/study/0", "0.1");
  WriteFinishedRun(dir, "outputs/study/2", "0.03");
}

std::string Chromium() {
#ifdef KILN_CHROMIUM
  return KILN_CHROMIUM;
#else
  return "";
#endif
}

// The page after its scripts ran, as headless Chromium serializes it.
std::string RenderedDom(const std::string& page, const std::string& profile,
                        const std::string& fragment = "") {
  auto result =
      RunProcess({Chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                  "--user-data-dir=" + profile, "--dump-dom", "file://" + page + fragment});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return result.out;
}

// A screenshot of the page, left in the build tree as NAME.
void Screenshot(const std::string& page, const std::string& profile, const std::string& name,
                const std::string& window_size) {
  std::string shot = std::string(KILN_TEST_OUTPUT_DIR) + "/" + name;
  std::remove(shot.c_str());
  auto result =
      RunProcess({Chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--user-data-dir=" + profile, "--window-size=" + window_size,
                  "--screenshot=" + shot, "file://" + page});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(FileExists(shot)) << result.err;
}

struct ChartInfo {
  int series = -1;
  int points = -1;
};

// data-chart="NAME" ... data-series="S" data-points="P" of every chart in the DOM.
std::map<std::string, ChartInfo> Charts(const std::string& dom) {
  std::map<std::string, ChartInfo> charts;
  std::regex div(
      R"re(<div class="chart" data-chart="([^"]*)" data-series="(\d+)" data-points="(\d+)")re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), div); it != std::sregex_iterator();
       ++it) {
    charts[(*it)[1]] = {std::stoi((*it)[2]), std::stoi((*it)[3])};
  }
  return charts;
}

// An attribute of the chart data-chart="NAME" (data-axes, data-axis-scales, data-kind).
std::string ChartAttribute(const std::string& dom, const std::string& chart,
                           const std::string& name) {
  size_t at = dom.find("data-chart=\"" + chart + "\"");
  if (at == std::string::npos) return "";
  std::string tag = dom.substr(at, dom.find('>', at) - at);
  std::smatch m;
  if (std::regex_search(tag, m, std::regex(" " + name + R"re(="([^"]*)")re"))) return m[1];
  return "";
}

std::string Attribute(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex(name + R"re(="([^"]*)")re"))) return m[1];
  return "";
}

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The runs table (#runs-table), and its rows (<tr data-run=...>).
std::string RunsTable(const std::string& dom) {
  size_t start = dom.find("id=\"runs-table\"");
  size_t end = dom.find("</table>", start);
  return start == std::string::npos || end == std::string::npos ? ""
                                                                : dom.substr(start, end - start);
}

int RunsTableRows(const std::string& dom) { return CountOf(RunsTable(dom), "<tr data-run="); }

#define SKIP_WITHOUT_UPLOT() \
  if (!KILN_HAVE_UPLOT)      \
  GTEST_SKIP() << "kiln was built without uPlot (run scripts/fetch_web_deps.sh, then cmake)"

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_UPLOT();
    if (Chromium().empty())
      GTEST_SKIP() << "chromium is not installed (apt-get install chromium): not rendering";
  }
};

TEST_F(ReportTest, RunsAndSweepsRenderWithTheirCurvesTablesAndWhatWasSkipped) {
  TempDir dir;
  WriteOutputs(dir);
  std::string page = std::string(KILN_TEST_OUTPUT_DIR) + "/report_test.html";
  auto result = RunProcess({KILN_BINARY, "report", dir.path() + "/outputs", "-o", page});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "7 run(s), 2 sweep(s)")) << result.err;
  std::string html = ReadFile(page);
  // Self-contained: uPlot is inlined, nothing is fetched.
  EXPECT_TRUE(absl::StrContains(html, "uPlot")) << "no charting library in the page";
  EXPECT_FALSE(absl::StrContains(html, "<script src=")) << "the page loads a script from elsewhere";
  EXPECT_FALSE(absl::StrContains(html, "http://")) << "the page refers to the network";

  std::string dom = RenderedDom(page, dir.path() + "/profile", "#all");
  ASSERT_FALSE(dom.empty());
  EXPECT_EQ(Attribute(dom, "data-errors"), "0")
      << Attribute(dom, "id=\"kiln-errors\"[^>]*>") << dom.substr(0, 3000);
  EXPECT_EQ(RunsTableRows(dom), 7);  // grid 0-2, run_a, running, and the study's trials 0 and 2
  auto charts = Charts(dom);
  // grid/0 (run 0): train/loss (10 points) and val/loss (2) on one chart; val/acc; the learning
  // rate.
  ASSERT_TRUE(charts.count("run-0-loss")) << dom.substr(0, 2000);
  EXPECT_EQ(charts["run-0-loss"].series, 2);
  EXPECT_EQ(charts["run-0-loss"].points, 12);
  EXPECT_EQ(charts["run-0-acc"].series, 1);
  EXPECT_EQ(charts["run-0-acc"].points, 2);
  EXPECT_EQ(charts["run-0-learning rate"].series, 1);
  EXPECT_EQ(charts["run-0-learning rate"].points, 10);
  EXPECT_FALSE(charts.count("run-0-epoch")) << "epoch is an x, not a curve";
  // The same curves against epochs (the epoch column: epoch 0 ends at step 9).
  auto by_epoch = Charts(RenderedDom(page, dir.path() + "/profile", "#all,epoch"));
  ASSERT_TRUE(by_epoch.count("run-0-loss-epoch"));
  EXPECT_EQ(by_epoch["run-0-loss-epoch"].series, 2);
  EXPECT_EQ(by_epoch["run-0-loss-epoch"].points, 12);
  // Across runs: the chosen metric (val/loss) of every run that logged it (5 finished runs).
  ASSERT_TRUE(charts.count("overlay"));
  EXPECT_EQ(charts["overlay"].series, 5);
  EXPECT_EQ(charts["overlay"].points, 10);
  // The Optuna study: 4 trials, best-so-far, pruned and failed marked.
  ASSERT_TRUE(charts.count("sweep-1-history")) << "sweeps: " << Attribute(dom, "data-charts");
  EXPECT_EQ(charts["sweep-1-history"].series, 4);
  EXPECT_TRUE(absl::StrContains(dom, ">pruned<") || absl::StrContains(dom, "PRUNED"));
  // Parallel coordinates, one line per trial: the grid's three jobs (the failed one grey, without
  // an objective) on lr and test/acc; the study's four trials on lr, log-scaled as its search
  // space (multirun.yaml) says, and val/acc.
  ASSERT_TRUE(charts.count("sweep-0-parallel"));
  EXPECT_EQ(charts["sweep-0-parallel"].series, 3);
  EXPECT_EQ(charts["sweep-0-parallel"].points, 5);  // 2 scored jobs x 2 axes, the failed one's lr
  EXPECT_EQ(ChartAttribute(dom, "sweep-0-parallel", "data-axes"), "2");
  EXPECT_EQ(ChartAttribute(dom, "sweep-0-parallel", "data-axis-scales"), "linear,linear");
  ASSERT_TRUE(charts.count("sweep-1-parallel"));
  EXPECT_EQ(charts["sweep-1-parallel"].series, 4);
  EXPECT_EQ(charts["sweep-1-parallel"].points, 6);  // the pruned and failed trials: lr only
  EXPECT_EQ(ChartAttribute(dom, "sweep-1-parallel", "data-axes"), "2");
  EXPECT_EQ(ChartAttribute(dom, "sweep-1-parallel", "data-axis-scales"), "log,linear");
  EXPECT_TRUE(charts.count("sweep-1-param-optimizer.lr")) << "the scatters stay";
  // The confusion matrix with its class names, the test metrics, the checkpoint link.
  EXPECT_TRUE(absl::StrContains(dom, "class=\"heatmap\" data-classes=\"3\""));
  EXPECT_TRUE(absl::StrContains(dom, "<th>bird</th>"));
  EXPECT_TRUE(absl::StrContains(dom, "test/acc"));
  EXPECT_TRUE(absl::StrContains(dom, "epoch=0-step=10.ckpt"));
  EXPECT_TRUE(absl::StrContains(RunsTable(dom), "<td>65.5 s</td>"))
      << "the wall time from train.log";
  EXPECT_TRUE(absl::StrContains(RunsTable(dom), "data-value=\"10\""))
      << "samples/s: 640 samples in 64 s";
  // What was skipped is said on the page.
  EXPECT_TRUE(absl::StrContains(dom, "the last line is cut short")) << "the truncated metrics.csv";
  EXPECT_TRUE(absl::StrContains(dom, "job 2 failed: option lr must be positive"));
  EXPECT_TRUE(absl::StrContains(dom, "running: no test_metrics.yaml"));

  Screenshot(page, dir.path() + "/profile", "report_test.png", "1400,2600");
}

TEST_F(ReportTest, OneRunFolderGivesOneRowAndItsChartsOpen) {
  TempDir dir;
  WriteFinishedRun(dir, "r1", "0.1");
  std::string page = dir.path() + "/one.html";
  auto result = RunProcess({KILN_BINARY, "report", dir.path() + "/r1", "-o", page});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string dom = RenderedDom(page, dir.path() + "/profile");
  EXPECT_EQ(Attribute(dom, "data-errors"), "0");
  EXPECT_EQ(RunsTableRows(dom), 1);
  auto charts = Charts(dom);
  EXPECT_EQ(charts.size(), 3u);  // loss, acc, learning rate; no overlay for one run
  EXPECT_EQ(charts["run-0-loss"].points, 12);
}

// Names are data, never markup: a run folder and a metric named like tags render as text.
TEST_F(ReportTest, NamesThatLookLikeMarkupStayText) {
  TempDir dir;
  std::string run = "x</script><b id=\"bold\">y & z";
  dir.Write(run + "/metrics.csv", "step,\"train/<i>loss</i>\"\n0,1.0\n1,0.5\n");
  std::string page = dir.path() + "/markup.html";
  auto result = RunProcess(
      {KILN_BINARY, "report", dir.path() + "/" + run, "-o", page, "--title", "<h2>t</h2>"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string dom = RenderedDom(page, dir.path() + "/profile");
  EXPECT_EQ(Attribute(dom, "data-errors"), "0") << dom.substr(0, 3000);
  EXPECT_EQ(RunsTableRows(dom), 1);
  EXPECT_FALSE(absl::StrContains(dom, "<b id=\"bold\">")) << "a folder name became markup";
  EXPECT_FALSE(absl::StrContains(dom, "<i>loss</i>")) << "a metric name became markup";
  EXPECT_FALSE(absl::StrContains(dom, "<h2>t</h2>")) << "the title became markup";
  EXPECT_TRUE(absl::StrContains(dom, "x&lt;/script&gt;&lt;b id=\"bold\"&gt;y &amp; z"));
}

// A long curve reaches the page thinned (at most two points per bucket) but keeps its spike.
TEST_F(ReportTest, LongCurvesAreThinnedButKeepTheirExtremes) {
  TempDir dir;
  std::string csv = "step,train/loss\n";
  for (int s = 0; s < 20000; ++s)
    absl::StrAppend(&csv, s, ",", s == 12345 ? 99.0 : 1.0 + (s % 7) * 0.01, "\n");
  dir.Write("long/metrics.csv", csv);
  std::string page = dir.path() + "/long.html";
  auto result = RunProcess({KILN_BINARY, "report", dir.path() + "/long", "-o", page});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string dom = RenderedDom(page, dir.path() + "/profile");
  EXPECT_EQ(Attribute(dom, "data-errors"), "0");
  auto charts = Charts(dom);
  ASSERT_TRUE(charts.count("run-0-loss"));
  EXPECT_LE(charts["run-0-loss"].points, 800);
  EXPECT_GE(charts["run-0-loss"].points, 400);
  EXPECT_TRUE(absl::StrContains(ReadFile(page), ",99,"))
      << "the spike at step 12345 was thinned away";
}

#if defined(BLOBS_PLUGIN) && defined(SWEEP_TOOLS_PLUGIN)
// What the real binary writes, not fixtures: a grid sweep of `kiln train` jobs, and an Optuna study
// (the sweep_tools plugin's `quadratic` launcher computes each trial's objective, no run folders).
TEST_F(ReportTest, RealGridSweepAndOptunaStudyOfTheBinary) {
  TempDir dir;
  auto grid = RunProcess({KILN_BINARY, "train", "-m", "--plugin", BLOBS_PLUGIN, "experiment=blobs",
                          "trainer.num_threads=1", "data.train_size=2000", "trainer.max_epochs=2",
                          "trainer.log_every_n_steps=1", "hydra.sweep.dir=" + dir.path() + "/grid",
                          "data.seed=0,1"});
  ASSERT_EQ(grid.exit_code, 0) << grid.err;
  std::string page = dir.path() + "/grid.html";
  auto result = RunProcess({KILN_BINARY, "report", dir.path() + "/grid", "-o", page});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "2 run(s), 1 sweep(s)")) << result.err;
  std::string dom = RenderedDom(page, dir.path() + "/profile");
  EXPECT_EQ(Attribute(dom, "data-errors"), "0");
  EXPECT_EQ(RunsTableRows(dom), 2);
  auto charts = Charts(dom);
  ASSERT_TRUE(charts.count("run-0-loss")) << dom.substr(0, 2000);
  EXPECT_GE(charts["run-0-loss"].series, 2);  // train and val
  ASSERT_TRUE(charts.count("sweep-0-history"));
  EXPECT_EQ(charts["sweep-0-history"].series, 2);  // the objective and the best so far
  EXPECT_EQ(charts["sweep-0-history"].points, 4);
  EXPECT_TRUE(charts.count("sweep-0-param-data.seed"));
  // Parallel coordinates: both jobs, on data.seed (a choice: 0,1) and test/acc.
  ASSERT_TRUE(charts.count("sweep-0-parallel"));
  EXPECT_EQ(charts["sweep-0-parallel"].series, 2);
  EXPECT_EQ(charts["sweep-0-parallel"].points, 4);
  EXPECT_EQ(ChartAttribute(dom, "sweep-0-parallel", "data-axes"), "2");
  EXPECT_EQ(ChartAttribute(dom, "sweep-0-parallel", "data-axis-scales"), "choice,linear");

  if (std::system(KILN_PYTHON_EXE " -c 'import optuna' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Optuna is not installed for " KILN_PYTHON_EXE ": the study part is skipped";
  }
  dir.Write("conf/train.yaml", "x: 0.0\n'y': 0.0\n");
  auto study = RunProcess({KILN_BINARY, "compose", "-m", "--plugin", SWEEP_TOOLS_PLUGIN,
                           "--config-path", dir.path() + "/conf", "hydra/sweeper=optuna",
                           "hydra.sweeper.sampler.seed=0", "hydra/launcher=quadratic",
                           "hydra.launcher.steps=1", "hydra.sweeper.objective=val/loss",
                           "hydra.sweeper.n_trials=6", "x=interval(-2,2)", "y=interval(-3,3)",
                           "hydra.sweep.dir=" + dir.path() + "/study"});
  ASSERT_EQ(study.exit_code, 0) << study.err;
  page = dir.path() + "/study.html";
  result = RunProcess({KILN_BINARY, "report", dir.path() + "/study", "-o", page});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  dom = RenderedDom(page, dir.path() + "/profile");
  EXPECT_EQ(Attribute(dom, "data-errors"), "0");
  charts = Charts(dom);
  EXPECT_EQ(charts["sweep-0-history"].series, 2);
  EXPECT_EQ(charts["sweep-0-history"].points, 12);  // 6 trials and 6 best-so-far points
  EXPECT_EQ(charts["sweep-0-param-x"].points, 6);
  EXPECT_EQ(charts["sweep-0-param-y"].points, 6);
  EXPECT_TRUE(absl::StrContains(dom, "minimize val/loss"));
  // Parallel coordinates: six trials on x, y (intervals) and val/loss.
  ASSERT_TRUE(charts.count("sweep-0-parallel"));
  EXPECT_EQ(charts["sweep-0-parallel"].series, 6);
  EXPECT_EQ(charts["sweep-0-parallel"].points, 18);
  EXPECT_EQ(ChartAttribute(dom, "sweep-0-parallel", "data-axes"), "3");
  EXPECT_EQ(ChartAttribute(dom, "sweep-0-parallel", "data-axis-scales"), "linear,linear,linear");
  Screenshot(page, dir.path() + "/profile", "report_study.png", "1400,1500");

  // The trials come from the study that study.yaml names; without it, the page says so and
  // shows summary.csv's trials.
  ASSERT_EQ(
      std::rename((dir.path() + "/study/optuna.db").c_str(), (dir.path() + "/away.db").c_str()), 0);
  result = RunProcess({KILN_BINARY, "report", dir.path() + "/study", "-o", page});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string html = ReadFile(page);
  EXPECT_TRUE(absl::StrContains(html, "could not read the study 'compose' (no study database at " +
                                          dir.path() +
                                          "/study/optuna.db); trial states are from summary.csv"));
  EXPECT_TRUE(absl::StrContains(html, "\"number\":5,\"state\":\"COMPLETE\""));
}
#endif

TEST(ReportInput, AFolderWithoutRunsIsOneLineAndExitCode2) {
  TempDir dir;
  dir.Write("empty/notes.txt", "nothing here\n");
  auto result =
      RunProcess({KILN_BINARY, "report", dir.path() + "/empty", "-o", dir.path() + "/r.html"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(CountOf(result.err, "\n"), 1) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "no runs under")) << result.err;
  EXPECT_FALSE(FileExists(dir.path() + "/r.html"));
}

TEST(ReportInput, MissingPathsAndUnknownFlagsAreOneLineAndExitCode2) {
  TempDir dir;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"report"},
                                               {"report", dir.path() + "/nope"},
                                               {"report", dir.path(), "--bogus"},
                                               {"report", dir.path(), "-o"}}) {
    std::vector<std::string> argv = {KILN_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = RunProcess(argv);
    EXPECT_EQ(result.exit_code, 2) << args.back() << ": " << result.err;
    EXPECT_EQ(CountOf(result.err, "\n"), 1) << result.err;
    EXPECT_TRUE(absl::StartsWith(result.err, "kiln: error: ")) << result.err;
  }
}

TEST(ReportInput, GarbageFilesAreNotedNotFatal) {
  SKIP_WITHOUT_UPLOT();
  TempDir dir;
  dir.Write("r/metrics.csv", "step,train/loss\n0,1.0\nnot,a,row\n\x01\x02\n2,abc\n3,0.5\n");
  dir.Write("r/test_metrics.yaml", "[unclosed\n");
  dir.Write("r/.hydra/config.yaml", "a: [1, 2\n");
  dir.Write("r/test_confusion_matrix.csv", "true/predicted,a,b\na,1\n");
  auto result =
      RunProcess({KILN_BINARY, "report", dir.path() + "/r", "-o", dir.path() + "/r.html"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::string html = ReadFile(dir.path() + "/r.html");
  EXPECT_TRUE(absl::StrContains(html, "malformed line"))
      << html.substr(html.find("kiln-data"), 2000);
  EXPECT_TRUE(absl::StrContains(html, "test_metrics.yaml: "));
  EXPECT_TRUE(absl::StrContains(html, ".hydra/config.yaml: "));
}

}  // namespace
}  // namespace kiln
