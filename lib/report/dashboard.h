// `kiln dashboard PATH [--port N] [--host ADDR] [--refresh SECONDS]`: the page of `kiln report`,
// served live from a small HTTP server (cpp-httplib) and redrawn while runs write. Bound to
// 127.0.0.1 unless told otherwise, read-only, and serving nothing outside PATH: a path with `..`
// is refused (403), and so is one that a symbolic link leads out of PATH. SIGTERM or SIGINT stop
// it.
#pragma once

#include <string>
#include <vector>

namespace kiln::report {

// Runs the command with the arguments after `dashboard`; returns the exit code. It lives in
// libkiln_dashboard (built when cpp-httplib is there), which `kiln` loads for this command only
// and enters through `extern "C" kiln_dashboard_main(const std::vector<std::string>*)`.
int RunDashboardCommand(const std::vector<std::string>& args);

// What a request for `url_path` under `root` (a real path, no symbolic links) may serve: the file's
// real path, or 403 (outside root, `..`) or 404 (missing, a folder). For the server and its tests.
struct ServedFile {
  int status = 404;
  std::string path;
};
ServedFile ResolveServedFile(const std::string& root, const std::string& url_path);

}  // namespace kiln::report
