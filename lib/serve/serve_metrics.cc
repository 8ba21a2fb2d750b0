#include "lib/serve/serve_metrics.h"

#include "absl/strings/str_cat.h"

namespace kiln::serve {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::string Histogram::Text(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    absl::StrAppend(&out, name, "_bucket{le=\"", bounds_[i], "\"} ", cumulative, "\n");
  }
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ", sum_, "\n",
                  name, "_count ", count_, "\n");
  return out;
}

ServeMetrics::ServeMetrics()
    : latency_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      batch_sizes_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void ServeMetrics::CountRequest(int status, double seconds) {
  latency_.Observe(seconds);
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[status];
}

std::string ServeMetrics::Text(int64_t queue_depth) const {
  std::string out =
      "# HELP kiln_requests_total HTTP requests answered, by status code.\n"
      "# TYPE kiln_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [status, n] : requests_)
      absl::StrAppend(&out, "kiln_requests_total{code=\"", status, "\"} ", n, "\n");
  }
  absl::StrAppend(
      &out,
      "# HELP kiln_request_duration_seconds Time from a request's arrival to its answer.\n"
      "# TYPE kiln_request_duration_seconds histogram\n",
      latency_.Text("kiln_request_duration_seconds"),
      "# HELP kiln_batch_size Inputs per batch (those that fail preprocessing included).\n"
      "# TYPE kiln_batch_size histogram\n",
      batch_sizes_.Text("kiln_batch_size"),
      "# HELP kiln_queue_depth Requests waiting for a batch.\n"
      "# TYPE kiln_queue_depth gauge\n"
      "kiln_queue_depth ",
      queue_depth, "\n");
  return out;
}

}  // namespace kiln::serve
