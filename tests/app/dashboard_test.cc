// `kiln dashboard` through the real binary on a free loopback port: the page and its data while a
// run is writing (a new metrics row shows up in the next fetch), files under the folder, `..` and
// symbolic-link escapes refused with 403, missing files 404, and a clean stop on SIGTERM.
#include "lib/report/dashboard.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::ReadFile;
using testing::TempDir;

int Status(httplib::Client& client, const std::string& path, std::string* body = nullptr) {
  auto res = client.Get(path.c_str());
  if (!res) return -1;
  if (body != nullptr) *body = res->body;
  return res->status;
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!KILN_HAVE_UPLOT)
      GTEST_SKIP() << "kiln was built without uPlot (run scripts/fetch_web_deps.sh, then cmake)";
    dir_.Write("served/r1/.hydra/config.yaml", "seed: 1\n");
    dir_.Write("served/r1/metrics.csv", "step,train/loss\n0,2.5\n1,2.25\n2,2.0\n");
    dir_.Write("outside/secret.txt", "the secret\n");
    root_ = dir_.path() + "/served";
    ASSERT_EQ(::symlink((dir_.path() + "/outside").c_str(), (root_ + "/escape_dir").c_str()), 0);
    ASSERT_EQ(
        ::symlink((dir_.path() + "/outside/secret.txt").c_str(), (root_ + "/r1/link.txt").c_str()),
        0);
    ASSERT_EQ(::symlink("metrics.csv", (root_ + "/r1/inside_link.csv").c_str()), 0);
    port_ = testing::FreeLoopbackPort();
    pid_ = testing::StartInOwnGroup(
        {KILN_BINARY, "dashboard", root_, "--port", std::to_string(port_), "--refresh", "0.5"});
    ASSERT_GT(pid_, 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_connection_timeout(2);
    // The server is up when it answers; give it a while on a loaded machine.
    for (int i = 0; i < 200 && Status(*client_, "/data.json") != 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Sends SIGTERM and waits (at most ~30 s) for the exit; returns the wait status.
  int Stop() {
    ::kill(pid_, SIGTERM);
    int status = -1;
    for (int i = 0; i < 300; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }

  TempDir dir_;
  std::string root_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(DashboardTest, ServesThePageAndSeesNewRowsWhileARunWrites) {
  std::string body;
  ASSERT_EQ(Status(*client_, "/", &body), 200) << "the dashboard did not answer on port " << port_;
  EXPECT_TRUE(absl::StrContains(body, "window.kilnLive = 500;"));
  EXPECT_TRUE(absl::StrContains(body, "uPlot"));
  ASSERT_EQ(Status(*client_, "/data.json", &body), 200);
  EXPECT_TRUE(absl::StrContains(body, "\"train/loss\":{\"n\":3,")) << body;
  // The run logs one more step (the csv logger rewrites its file atomically).
  dir_.Write("served/r1/metrics.csv.tmp", "step,train/loss\n0,2.5\n1,2.25\n2,2.0\n3,1.75\n");
  ASSERT_EQ(::rename((root_ + "/r1/metrics.csv.tmp").c_str(), (root_ + "/r1/metrics.csv").c_str()),
            0);
  ASSERT_EQ(Status(*client_, "/data.json", &body), 200);
  EXPECT_TRUE(absl::StrContains(body, "\"train/loss\":{\"n\":4,")) << body;
  // Files under the folder, links inside it included.
  ASSERT_EQ(Status(*client_, "/r1/metrics.csv", &body), 200);
  EXPECT_EQ(body, ReadFile(root_ + "/r1/metrics.csv"));
  EXPECT_EQ(Status(*client_, "/r1/inside_link.csv"), 200);
  EXPECT_EQ(Status(*client_, "/r1/.hydra/config.yaml", &body), 200);
  EXPECT_EQ(body, "seed: 1\n");
#ifdef KILN_CHROMIUM
  // The live page renders in a browser without errors, its run's curve included.
  auto dom = testing::RunProcess({KILN_CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                                  "--user-data-dir=" + dir_.path() + "/profile", "--dump-dom",
                                  absl::StrCat("http://127.0.0.1:", port_, "/")});
  EXPECT_TRUE(absl::StrContains(dom.out, "data-errors=\"0\"")) << dom.out.substr(0, 2000);
  EXPECT_TRUE(
      absl::StrContains(dom.out, "data-chart=\"run-0-loss\" data-series=\"1\" data-points=\"4\""));
#endif
  int status = Stop();
  ASSERT_TRUE(WIFEXITED(status)) << "not a clean exit on SIGTERM: wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(DashboardTest, NothingOutsideTheFolderIsServed) {
  ASSERT_EQ(Status(*client_, "/data.json"), 200)
      << "the dashboard did not answer on port " << port_;
  for (const std::string path :
       {"/../../etc/passwd", "/r1/../../outside/secret.txt", "/%2e%2e/outside/secret.txt",
        "/r1/%2E%2E/%2E%2E/outside/secret.txt", "/escape_dir/secret.txt", "/r1/link.txt",
        "/..%2foutside%2fsecret.txt"}) {
    std::string body;
    int code = Status(*client_, path, &body);
    EXPECT_EQ(code, 403) << path;
    EXPECT_FALSE(absl::StrContains(body, "the secret")) << path;
  }
  EXPECT_EQ(Status(*client_, "/nope.txt"), 404);
  EXPECT_EQ(Status(*client_, "/r1"), 404) << "folders are not listed";
  auto post = client_->Post("/data.json", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_NE(post->status, 200) << "the dashboard is read-only";
  int status = Stop();
  ASSERT_TRUE(WIFEXITED(status)) << "wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(DashboardFiles, ResolvesOnlyRegularFilesInsideTheRoot) {
  TempDir dir;
  dir.Write("root/a/b.txt", "b\n");
  dir.Write("elsewhere.txt", "x\n");
  char real[PATH_MAX];
  ASSERT_NE(::realpath((dir.path() + "/root").c_str(), real), nullptr);
  std::string root = real;
  ASSERT_EQ(::symlink((dir.path() + "/elsewhere.txt").c_str(), (root + "/out.txt").c_str()), 0);
  EXPECT_EQ(report::ResolveServedFile(root, "a/b.txt").status, 200);
  EXPECT_EQ(report::ResolveServedFile(root, "a/b.txt").path, root + "/a/b.txt");
  EXPECT_EQ(report::ResolveServedFile(root, "a/../a/b.txt").status, 403);
  EXPECT_EQ(report::ResolveServedFile(root, "..\\elsewhere.txt").status, 403);
  EXPECT_EQ(report::ResolveServedFile(root, "out.txt").status, 403);
  EXPECT_EQ(report::ResolveServedFile(root, "a").status, 404);
  EXPECT_EQ(report::ResolveServedFile(root, "missing").status, 404);
  EXPECT_EQ(report::ResolveServedFile(root, std::string("a/b.txt\0x", 9)).status, 403);
}

TEST(DashboardInput, BadArgumentsAreOneLineAndExitCode2) {
  TempDir dir;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"dashboard"},
                                               {"dashboard", dir.path() + "/nope"},
                                               {"dashboard", dir.path(), "--port", "http"},
                                               {"dashboard", dir.path(), "--port", "70000"},
                                               {"dashboard", dir.path(), "--bogus"},
                                               {"dashboard", dir.path(), dir.path()}}) {
    std::vector<std::string> argv = {KILN_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = testing::RunProcess(argv);
    EXPECT_EQ(result.exit_code, 2) << args.back() << ": " << result.err;
    EXPECT_TRUE(absl::StartsWith(result.err, "kiln: error: ")) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

}  // namespace
}  // namespace kiln
