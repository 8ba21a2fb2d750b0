#include "lib/report/dashboard.h"

#include <httplib.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/exit_code.h"
#include "lib/report/report_command.h"
#include "lib/report/report_page.h"
#include "lib/report/run_reader.h"
#include "lib/run/internal/http_thread_pool.h"

namespace kiln::report {
namespace {

constexpr char kUsage[] =
    "usage: kiln dashboard PATH [--port N] [--host ADDR] [--refresh SECONDS]\n"
    "  Serves the page of `kiln report PATH` at http://ADDR:N/ (default 127.0.0.1:8050), redrawn\n"
    "  every SECONDS (default 5) while runs write. Read-only; files outside PATH are never "
    "served.\n"
    "  --port 0 picks a free port. SIGTERM or Ctrl-C stops it.\n";

int Fail(const std::string& message) { return FailWithMessage(message); }

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) == nullptr ? "" : std::string(buf);
}

}  // namespace

ServedFile ResolveServedFile(const std::string& root, const std::string& url_path) {
  if (url_path.find('\0') != std::string::npos) return {403, ""};
  for (absl::string_view part : absl::StrSplit(url_path, absl::ByAnyChar("/\\"))) {
    if (part == "..") return {403, ""};
  }
  std::string real = RealPath(absl::StrCat(root, "/", url_path));
  if (real.empty()) return {404, ""};
  if (real != root && real.rfind(root + "/", 0) != 0) return {403, ""};  // a link out of root
  struct stat st;
  if (::stat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {404, ""};
  return {200, real};
}

namespace {

std::string ContentType(const std::string& path) {
  static const std::vector<std::pair<std::string, std::string>> kTypes = {
      {".html", "text/html; charset=utf-8"},
      {".json", "application/json"},
      {".csv", "text/csv; charset=utf-8"},
      {".yaml", "text/plain; charset=utf-8"},
      {".log", "text/plain; charset=utf-8"},
      {".txt", "text/plain; charset=utf-8"},
      {".tsv", "text/plain; charset=utf-8"},
      {".jsonl", "text/plain; charset=utf-8"},
      {".png", "image/png"},
      {".svg", "image/svg+xml"}};
  for (const auto& [ending, type] : kTypes) {
    if (path.size() >= ending.size() &&
        path.compare(path.size() - ending.size(), ending.size(), ending) == 0) {
      return type;
    }
  }
  return "application/octet-stream";
}

// The runs now under root; none yet is a page that says so, not an error.
Collection ReadNow(const std::string& root) {
  auto collection = ReadRuns({root});
  if (collection.ok()) return *std::move(collection);
  Collection empty;
  empty.notes.push_back(
      absl::StrCat(collection.status().message(), "; this page shows them when they appear"));
  return empty;
}

}  // namespace

int RunDashboardCommand(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string host = "127.0.0.1";
  int port = 8050;
  double refresh = 5;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (a == "--port" || a == "--host" || a == "--refresh") {
      if (i + 1 >= args.size()) return Fail(absl::StrCat(a, " needs a value"));
      const std::string& v = args[++i];
      if (a == "--host") {
        host = v;
      } else if (a == "--port" && (!absl::SimpleAtoi(v, &port) || port < 0 || port > 65535)) {
        return Fail(absl::StrCat("--port takes a port number (0 for any free one), not '", v, "'"));
      } else if (a == "--refresh" && (!absl::SimpleAtod(v, &refresh) || !(refresh >= 0.2))) {
        return Fail(absl::StrCat("--refresh takes seconds (at least 0.2), not '", v, "'"));
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return Fail(absl::StrCat("unknown flag '", a,
                               "' for kiln dashboard (flags: --port N, --host ADDR, --refresh S)"));
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 1)
    return Fail("kiln dashboard serves one folder: kiln dashboard PATH [--port N]");
  if (!HaveChartingLibrary()) {
    return Fail(
        "this kiln was built without uPlot, the charting library of kiln dashboard: run "
        "scripts/fetch_web_deps.sh (or scripts/install_deps.sh), then cmake again");
  }
  std::string root = RealPath(paths[0]);
  struct stat st;
  if (root.empty() || ::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Fail(absl::StrCat("'", paths[0], "' is not a directory"));
  }

  // SIGTERM and SIGINT go to one thread that stops the server; the server's threads never see them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  httplib::Server server;
  server.new_task_queue = [] { return new HttpThreadPool(CPPHTTPLIB_THREAD_POOL_COUNT); };
  const int refresh_ms = static_cast<int>(refresh * 1000);
  const std::string title = absl::StrCat("kiln dashboard: ", paths[0]);
  server.Get("/", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(ReportHtml(ReadNow(root), root, title, refresh_ms), "text/html; charset=utf-8");
    res.set_header("Cache-Control", "no-store");
  });
  server.Get("/data.json", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(ReportJson(ReadNow(root), root), "application/json");
    res.set_header("Cache-Control", "no-store");
  });
  // Everything else is a file under root, streamed (checkpoints can be large).
  server.Get(R"(/(.+))", [&](const httplib::Request& req, httplib::Response& res) {
    ServedFile file = ResolveServedFile(root, req.matches[1]);
    res.status = file.status;
    if (file.status != 200) {
      res.set_content(
          file.status == 403 ? "403 outside the dashboard's folder\n" : "404 not found\n",
          "text/plain");
      return;
    }
    auto in = std::make_shared<std::ifstream>(file.path, std::ios::binary);
    struct stat fst;
    size_t size = ::stat(file.path.c_str(), &fst) == 0 ? static_cast<size_t>(fst.st_size) : 0;
    res.set_content_provider(
        size, ContentType(file.path), [in](size_t offset, size_t length, httplib::DataSink& sink) {
          char buf[1 << 16];
          in->seekg(static_cast<std::streamoff>(offset));
          in->read(buf, static_cast<std::streamsize>(std::min(length, sizeof(buf))));
          std::streamsize got = in->gcount();
          if (got <= 0) return false;
          sink.write(buf, static_cast<size_t>(got));
          return true;
        });
  });

  int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    return Fail(absl::StrCat("cannot listen on ", host, ":", port,
                             " (in use? --port N, or --port 0 for a free one)"));
  }
  std::atomic<bool> signalled{false};
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    signalled = true;
    server.stop();
  });
  if (host != "127.0.0.1" && host != "localhost" && host != "::1") {
    std::fprintf(stderr,
                 "kiln dashboard: warning: listening on %s, not loopback: whoever reaches this "
                 "machine can read the files under %s\n",
                 host.c_str(), root.c_str());
  }
  std::fprintf(stderr,
               "kiln dashboard: serving %s at http://%s:%d/ (read-only; SIGTERM or Ctrl-C stops)\n",
               root.c_str(), host.c_str(), bound);
  std::fflush(stderr);
  bool listened = server.listen_after_bind();
  if (!signalled) pthread_kill(stopper.native_handle(), SIGTERM);  // the server ended by itself
  stopper.join();
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
  std::fprintf(stderr, "kiln dashboard: stopped\n");
  return listened ? kExitOk : kExitFailure;
}

}  // namespace kiln::report

// The entry `kiln` finds with dlsym after loading this library for `kiln dashboard`.
extern "C" int kiln_dashboard_main(const std::vector<std::string>* args) {
  return kiln::report::RunDashboardCommand(*args);
}
