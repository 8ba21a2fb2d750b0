// cer and wer: the character and word error rates of decoded texts (speech recognition): edit
// distance summed over the epoch's utterances divided by their references' summed length, in
// Unicode code points or whitespace-separated words. Empty references add nothing.
#include "absl/strings/str_cat.h"
#include "components/metrics/edit_distance.h"
#include "lib/registry/registry.h"
#include "lib/trainer/metric.h"

namespace kiln::metrics {
namespace {

class ErrorRate : public Metric {
 public:
  using Count = ErrorCount (*)(std::string_view, std::string_view);
  ErrorRate(const MetricOptions& o, const char* name, Count count)
      : Metric(o), name_(name), count_(count) {
    AddState("errors", &errors_);
    AddState("reference", &reference_);
  }

  absl::Status Update(const MetricBatch& batch) override {
    if (batch.predicted_texts.size() != batch.target_texts.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, " needs a decoded text per reference, got ",
                       batch.predicted_texts.size(), " for ", batch.target_texts.size()));
    }
    for (size_t i = 0; i < batch.target_texts.size(); ++i) {
      ErrorCount c = count_(batch.predicted_texts[i], batch.target_texts[i]);
      if (c.reference == 0) continue;
      errors_ += c.errors;
      reference_ += c.reference;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    return Share(errors_, reference_);
  }

 private:
  const char* name_;
  Count count_;
  torch::Tensor errors_ = torch::zeros({}, torch::kInt64);
  torch::Tensor reference_ = torch::zeros({}, torch::kInt64);
};

KILN_REGISTER_BOUND(Metric, "cer",
                    "Character error rate of decoded texts (edit distance over code points)",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<ErrorRate>(o, "cer", &CharacterErrors);
                    });
KILN_REGISTER_BOUND(Metric, "wer", "Word error rate of decoded texts (edit distance over words)",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<ErrorRate>(o, "wer", &WordErrors);
                    });

}  // namespace
}  // namespace kiln::metrics
