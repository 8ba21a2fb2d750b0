#include "lib/report/lr_find_plot.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/report/page_json.h"
#include "lib/report/report_page.h"
#include "lib/run/internal/spawn.h"

namespace kiln::report {
namespace {

const char kLrFindTemplate[] =
#include "lib/report/web/lr_find_html.inc"
    ;

void WriteNumbers(PageJson& j, const char* key, const std::vector<double>& values) {
  j.Key(key).Open('[');
  for (double v : values) j.Num(v, "%.10g");  // non-finite: null, a gap in the curve
  j.Close(']');
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string LrFindHtml(const LrCurve& curve, const std::string& title) {
  PageJson j;
  j.Open('{');
  WriteNumbers(j, "lr", curve.lrs);
  WriteNumbers(j, "loss", curve.losses);
  WriteNumbers(j, "smoothed", curve.smoothed);
  j.Key("suggestion");
  if (curve.suggestion.has_value()) {
    j.Int(static_cast<int64_t>(*curve.suggestion));
  } else {
    j.Null();
  }
  j.Key("log_x").Raw(curve.log_x ? "true" : "false").Close('}');
  return absl::StrReplaceAll(kLrFindTemplate, {{"{{TITLE}}", HtmlText(title)},
                                               {"{{UPLOT_CSS}}", UplotCss()},
                                               {"{{UPLOT_JS}}", UplotJs()},
                                               {"{{DATA}}", j.Take()}});
}

std::string FindChromium() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (const char* name :
       {"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(dir, "/", name);
      if (IsExecutableFile(candidate)) return candidate;
    }
  }
  return "";
}

absl::Status ScreenshotPage(const std::string& chromium, const std::string& page,
                            const std::string& png, int width, int height) {
  char profile[] = "/tmp/kiln-chromium-XXXXXX";
  if (::mkdtemp(profile) == nullptr)
    return absl::InternalError("cannot create a folder in /tmp for Chromium");
  std::string log = std::string(profile) + "/chromium.log";
  std::remove(png.c_str());
  run::SpawnOptions options;
  options.output_file = log;
  absl::StatusOr<pid_t> pid =
      run::SpawnProcess({chromium, "--headless", "--no-sandbox", "--disable-gpu",
                         "--hide-scrollbars", absl::StrCat("--user-data-dir=", profile, "/profile"),
                         absl::StrCat("--window-size=", width, ",", height), "--screenshot=" + png,
                         "file://" + std::filesystem::absolute(page).string()},
                        options);
  absl::Status status = pid.status();
  if (pid.ok()) {
    int wait_status = 0;
    while (::waitpid(*pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    struct stat st;
    if (run::ExitCodeOf(wait_status) != 0 || ::stat(png.c_str(), &st) != 0 || st.st_size == 0) {
      status = absl::InternalError(absl::StrCat(chromium, " ", run::DescribeExit(wait_status),
                                                " without a picture: ", run::LastLineOf(log)));
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(profile, ignored);
  return status;
}

absl::StatusOr<PlotFiles> WriteLrFindPlot(const std::string& dir, const LrCurve& curve,
                                          const std::string& title) {
  PlotFiles files;
  files.html = dir + "/lr_find.html";
  if (!HaveChartingLibrary()) {
    files.html.clear();
    files.note =
        "lr_find.png not drawn: this kiln was built without uPlot (run scripts/fetch_web_deps.sh, "
        "then cmake again); the curve is in lr_find.csv";
    return files;
  }
  if (auto st = WriteFileAtomically(files.html, LrFindHtml(curve, title)); !st.ok()) return st;
  std::string chromium = FindChromium();
  if (chromium.empty()) {
    files.note =
        "lr_find.png not drawn: Chromium is not installed (apt-get install chromium); the curve is "
        "in lr_find.csv and lr_find.html";
    return files;
  }
  std::string png = dir + "/lr_find.png";
  if (auto st = ScreenshotPage(chromium, files.html, png, 900, 540); !st.ok()) {
    files.note = absl::StrCat("lr_find.png not drawn: ", st.message());
    return files;
  }
  files.png = png;
  return files;
}

}  // namespace kiln::report
