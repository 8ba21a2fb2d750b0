#include "lib/report/downsample.h"

#include <algorithm>
#include <cmath>

namespace kiln::report {

double BucketWidth(double max_step, int64_t buckets) {
  if (buckets <= 0 || !(max_step > 0)) return 1;
  return std::max(1.0, std::ceil((max_step + 1) / static_cast<double>(buckets)));
}

Series Downsample(const Series& series, double width, int64_t max_buckets) {
  if (series.size() <= static_cast<size_t>(2 * max_buckets) || !(width > 0)) return series;
  Series out;
  size_t i = 0;
  const size_t n = series.size();
  while (i < n) {
    double bucket = std::floor(series.steps[i] / width);
    size_t lo = n, hi = n;
    for (; i < n && std::floor(series.steps[i] / width) == bucket; ++i) {
      double v = series.values[i];
      if (std::isnan(v)) continue;
      if (lo == n || v < series.values[lo]) lo = i;
      if (hi == n || v > series.values[hi]) hi = i;
    }
    if (lo == n) continue;
    double start = bucket * width;
    size_t first = std::min(lo, hi), second = std::max(lo, hi);
    out.steps.push_back(start);
    out.values.push_back(series.values[first]);
    if (second != first) {
      out.steps.push_back(start + std::floor(width / 2));
      out.values.push_back(series.values[second]);
    }
  }
  return out;
}

}  // namespace kiln::report
