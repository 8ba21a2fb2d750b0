// perplexity and bits_per_character: from the cross-entropy of the true tokens under the scores
// (logits [..., vocab] over token ids [...], masked positions left out), summed over the epoch.
// Perplexity is exp of the mean loss per token; bits per character divide the summed loss by
// the characters the tokens stand for (MetricBatch::characters) and ln 2, so tokenizers compare.
#include <cmath>

#include "components/metrics/classification.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::metrics {
namespace {

class TokenLoss : public Metric {
 public:
  TokenLoss(const MetricOptions& o, bool per_character) : Metric(o), per_character_(per_character) {
    AddState("loss_sum", &loss_sum_);
    AddState("count", &count_);
  }

  absl::Status Update(const MetricBatch& batch) override {
    if (per_character_ && batch.characters <= 0) return absl::OkStatus();  // characters unknown
    torch::Tensor losses;
    if (batch.losses.defined() && batch.target.defined() &&
        batch.losses.sizes() == batch.target.sizes()) {
      // The task's own per-position losses: the same values as below, without a second pass.
      losses = batch.losses.reshape({-1});
      if (batch.mask.defined()) {
        losses = losses.masked_select(batch.mask.reshape({-1}).to(losses.device(), torch::kBool));
      }
    } else {
      KILN_ASSIGN_OR_RETURN(
          Rows rows, CountedRows(batch, per_character_ ? "bits_per_character" : "perplexity"));
      losses = torch::nn::functional::cross_entropy(
          rows.preds.to(torch::kFloat32), rows.target,
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    }
    loss_sum_ += losses.to(torch::kFloat64).sum().item<double>();
    count_ += per_character_ ? batch.characters : static_cast<double>(losses.numel());
    return absl::OkStatus();
  }

  absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& /*class_names*/) const override {
    double count = count_.item<double>();
    if (count <= 0) return MetricValues();
    double mean = loss_sum_.item<double>() / count;
    return MetricValues{{"", per_character_ ? mean / std::log(2.0) : std::exp(mean)}};
  }

 private:
  bool per_character_;
  torch::Tensor loss_sum_ = torch::zeros({}, torch::kFloat64);  // nats
  torch::Tensor count_ = torch::zeros({}, torch::kFloat64);     // tokens, or characters
};

KILN_REGISTER_BOUND(Metric, "perplexity", "exp of the mean cross-entropy per token",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<TokenLoss>(o, false);
                    });
KILN_REGISTER_BOUND(
    Metric, "bits_per_character",
    "Cross-entropy in bits per character of text (the summed token loss over the characters)",
    MetricOptionBinding<MetricOptions>(),
    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
      return std::make_shared<TokenLoss>(o, true);
    });

}  // namespace
}  // namespace kiln::metrics
