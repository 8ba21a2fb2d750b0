// Test plugin: a metric, used from a config by plugin_test.
//   +task.metrics.err={_target_: error_rate}   -> val/err, test/err: the share of rows predicted
//                                                  wrong over the epoch (1 - accuracy)
#include <kiln/plugin.h>
#include <kiln/trainer.h>

#include <memory>
#include <string>
#include <vector>

namespace {

class ErrorRate : public kiln::Metric {
 public:
  explicit ErrorRate(const kiln::MetricOptions& o) : Metric(o) {
    AddState("wrong", &wrong_);
    AddState("rows", &rows_);
  }

  absl::Status Update(const kiln::MetricBatch& batch) override {
    wrong_ += batch.preds.argmax(1).ne(batch.target).sum().item<int64_t>();
    rows_ += batch.target.size(0);
    return absl::OkStatus();
  }

  absl::StatusOr<kiln::MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    return kiln::Share(wrong_, rows_);
  }

 private:
  torch::Tensor wrong_ = torch::zeros({}, torch::kInt64);
  torch::Tensor rows_ = torch::zeros({}, torch::kInt64);
};

void Register(kiln::Registrar& registrar) {
  registrar.Add<kiln::Metric>(
      "error_rate", "Share of rows predicted wrong (test plugin)",
      kiln::MetricOptionBinding<kiln::MetricOptions>(),
      [](const kiln::MetricOptions& o) -> absl::StatusOr<std::shared_ptr<kiln::Metric>> {
        return std::make_shared<ErrorRate>(o);
      });
}

}  // namespace

KILN_PLUGIN("metric_tools", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
