// Thinning curves for display: at most two points per bucket, the bucket's minimum and maximum in
// step order, at positions shared by every curve thinned with the same width.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lib/report/downsample.h"

namespace kiln::report {
namespace {

Series Ramp(int n, int first_step = 0) {
  Series s;
  for (int i = 0; i < n; ++i) {
    s.steps.push_back(first_step + i);
    s.values.push_back(i % 10);
  }
  return s;
}

TEST(Downsample, ShortCurvesAreKeptAsTheyAre) {
  Series s = Ramp(800);
  Series out = Downsample(s, BucketWidth(799, 400), 400);
  EXPECT_EQ(out.steps, s.steps);
  EXPECT_EQ(out.values, s.values);
}

TEST(Downsample, LongCurvesKeepEachBucketsMinimumAndMaximum) {
  Series s = Ramp(20000);
  s.values[12345] = 99;  // a spike
  s.values[777] = -5;    // a dip
  double width = BucketWidth(19999, 400);
  EXPECT_EQ(width, 50);  // 20,000 steps in 400 buckets
  Series out = Downsample(s, width, 400);
  EXPECT_LE(out.size(), 800u);
  EXPECT_GE(out.size(), 700u);
  EXPECT_EQ(*std::max_element(out.values.begin(), out.values.end()), 99);
  EXPECT_EQ(*std::min_element(out.values.begin(), out.values.end()), -5);
  for (size_t i = 0; i < out.size(); ++i) {
    double offset = std::fmod(out.steps[i], width);
    EXPECT_TRUE(offset == 0 || offset == 25) << out.steps[i];  // a bucket's start or middle
  }
}

TEST(Downsample, CurvesThinnedWithOneWidthShareTheirSteps) {
  double width = BucketWidth(19999, 400);
  Series a = Downsample(Ramp(20000), width, 400);
  Series b = Downsample(Ramp(19000, 1000), width, 400);
  size_t shared = 0;
  for (double x : b.steps) shared += std::binary_search(a.steps.begin(), a.steps.end(), x) ? 1 : 0;
  EXPECT_EQ(shared, b.size());
}

TEST(Downsample, NotANumberIsDroppedWhenThinning) {
  Series s = Ramp(2000);
  for (size_t i = 0; i < s.size(); i += 2) s.values[i] = std::nan("");
  Series out = Downsample(s, BucketWidth(1999, 100), 100);
  for (double v : out.values) EXPECT_FALSE(std::isnan(v));
  EXPECT_LE(out.size(), 200u);
}

}  // namespace
}  // namespace kiln::report
