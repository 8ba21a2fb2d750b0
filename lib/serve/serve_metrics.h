// What `kiln serve` counts, written in the Prometheus text format (GET /metrics): requests by
// status code, a request-latency histogram, a batch-size histogram and the queue depth.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

// A cumulative histogram with fixed upper bounds (Prometheus' `le` buckets, +Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // NAME_bucket{le=...}, NAME_sum and NAME_count lines.
  std::string Text(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
  mutable std::mutex mu_;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void CountRequest(int status, double seconds);
  void CountBatch(int64_t size) { batch_sizes_.Observe(static_cast<double>(size)); }
  // The whole exposition; `queue_depth` is read when asked.
  std::string Text(int64_t queue_depth) const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> requests_;  // by status code
  Histogram latency_, batch_sizes_;
};

}  // namespace kiln::serve
