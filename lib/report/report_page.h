// The page `kiln report` writes: one self-contained HTML file holding the runs' data as JSON, the
// charting library (uPlot) and a small renderer (web/report.js), so that it opens from file://
// with no server and no network.
#pragma once

#include <string>

#include "lib/report/run_reader.h"

namespace kiln::report {

// How many buckets a curve is thinned to for display (two points each at most); see downsample.h.
inline constexpr int64_t kDisplayBuckets = 400;

// The data the page renders, as JSON; links (checkpoints) are relative to `page_dir`.
std::string ReportJson(const Collection& collection, const std::string& page_dir);

// The whole page around ReportJson. With `live_refresh_ms` > 0 (`kiln dashboard`), the page fetches
// data.json beside it that often and redraws when it changed.
std::string ReportHtml(const Collection& collection, const std::string& page_dir,
                       const std::string& title, int live_refresh_ms = 0);

// The charting library's script and stylesheet, as built in ("" without it); the lr_find plot
// inlines them too.
const char* UplotJs();
const char* UplotCss();

// Whether the charting library was built in (scripts/fetch_web_deps.sh fetched it before cmake
// ran).
bool HaveChartingLibrary();

}  // namespace kiln::report
