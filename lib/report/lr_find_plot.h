// The plot of `kiln tune lr_find`: a self-contained page (uPlot, as kiln report's) of the loss
// against the learning rate with the suggestion marked, and its picture taken by headless
// Chromium. Needs no LibTorch.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::report {

struct LrCurve {
  std::vector<double> lrs, losses, smoothed;
  std::optional<size_t> suggestion;  // an index into the vectors
  bool log_x = true;                 // an exponential sweep
};

// The page: lr on x (log scale when log_x), the losses and the smoothed losses, a red point at
// the suggestion.
std::string LrFindHtml(const LrCurve& curve, const std::string& title);

struct PlotFiles {
  std::string html;  // always written
  std::string png;   // empty when it could not be drawn
  std::string note;  // then why, and what to do (one line)
};

// Writes DIR/lr_find.html and, when kiln has its charting library and Chromium is installed,
// DIR/lr_find.png (860x490). Only failing to write the page is an error.
absl::StatusOr<PlotFiles> WriteLrFindPlot(const std::string& dir, const LrCurve& curve,
                                          const std::string& title);

// Headless Chromium on PATH (chromium, chromium-browser, google-chrome-stable, google-chrome), or
// "".
std::string FindChromium();

// A PNG of `page` (an HTML file) as a WIDTHxHEIGHT window shows it, by headless Chromium.
absl::Status ScreenshotPage(const std::string& chromium, const std::string& page,
                            const std::string& png, int width, int height);

}  // namespace kiln::report
