#include "lib/report/report_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/exit_code.h"
#include "lib/base/files.h"
#include "lib/report/report_page.h"
#include "lib/report/run_reader.h"

namespace kiln::report {
namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] =
    "usage: kiln report PATH... [-o report.html] [--title TEXT]\n"
    "  PATH: a run folder, a sweep folder (multirun/DATE/TIME) or a folder of them (outputs/)\n"
    "  Writes one HTML page (opens from file://, offline): every run's curves, test metrics,\n"
    "  confusion matrix, config and checkpoints; a table of the runs; the sweeps' histories.\n";

int Fail(const std::string& message) { return FailWithMessage(message); }

}  // namespace

int FailWithMessage(const std::string& message) {
  std::fprintf(stderr, "kiln: error: %s\n", message.c_str());
  return kExitUsage;
}

int RunReportCommand(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string output = "report.html";
  std::string title;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (a == "-o" || a == "--output" || a == "--title") {
      if (i + 1 >= args.size()) return Fail(absl::StrCat(a, " needs a value"));
      (a == "--title" ? title : output) = args[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      output = a.substr(9);
    } else if (a.rfind("--title=", 0) == 0) {
      title = a.substr(8);
    } else if (a.size() > 1 && a[0] == '-') {
      return Fail(
          absl::StrCat("unknown flag '", a, "' for kiln report (flags: -o FILE, --title TEXT)"));
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty())
    return Fail("kiln report needs a run or sweep folder: kiln report PATH... [-o report.html]");
  if (!HaveChartingLibrary()) {
    return Fail(
        "this kiln was built without uPlot, the charting library of kiln report: run "
        "scripts/fetch_web_deps.sh (or scripts/install_deps.sh), then cmake again");
  }
  auto start = std::chrono::steady_clock::now();
  auto collection = ReadRuns(paths);
  if (!collection.ok()) return Fail(std::string(collection.status().message()));
  std::error_code ec;
  fs::path out = fs::absolute(output, ec);
  if (title.empty())
    title = absl::StrCat("kiln report: ", paths.size() == 1 ? paths[0] : "several folders");
  std::string html = ReportHtml(*collection, out.parent_path().string(), title);
  if (!out.parent_path().empty()) (void)MakeDirs(out.parent_path().string());
  if (auto st = WriteFileAtomically(out.string(), html); !st.ok())
    return Fail(std::string(st.message()));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t notes = collection->notes.size();
  for (const auto& r : collection->runs) notes += r.notes.size();
  for (const auto& s : collection->sweeps) notes += s.notes.size();
  std::fprintf(
      stderr,
      "kiln report: %zu run(s), %zu sweep(s), %zu note(s) on what was skipped -> %s (%s, %.2f s)\n",
      collection->runs.size(), collection->sweeps.size(), notes, output.c_str(),
      html.size() >= (1 << 20) ? absl::StrFormat("%.1f MB", html.size() / 1048576.0).c_str()
                               : absl::StrFormat("%.0f KB", html.size() / 1024.0).c_str(),
      seconds);
  return kExitOk;
}

}  // namespace kiln::report
