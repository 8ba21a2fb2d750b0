// Thins a long curve for display without hiding its spikes: the steps are cut into buckets of one
// width, and each bucket keeps its lowest and its highest point (in step order). Every run's curve
// of one metric uses the same buckets, so overlaid curves share their x positions and the page
// joins them cheaply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::report {

struct Series {
  std::vector<double> steps;
  std::vector<double> values;  // NaN where a value was not a number
  size_t size() const { return steps.size(); }
};

// The bucket width that gives at most `buckets` buckets up to `max_step` (at least 1).
double BucketWidth(double max_step, int64_t buckets);

// `series` unchanged when it has at most 2 * max_buckets points; otherwise at most two points per
// bucket of `width`: the minimum and the maximum, in step order, each at the step of the bucket's
// start (the first of the two) or its middle (the second), so that curves thinned with the same
// width line up. NaN values are dropped when thinning.
Series Downsample(const Series& series, double width, int64_t max_buckets);

}  // namespace kiln::report
