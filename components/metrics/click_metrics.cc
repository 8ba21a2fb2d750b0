// The click-prediction metrics, over a binary label and one logit per row (click_prediction's
// batches): auc (the area under the ROC curve, from histograms of the predicted probability, so
// its state adds up across ranks), log_loss (mean binary cross-entropy), normalized_entropy (log
// loss over the entropy of the observed click rate: below 1 is better than always predicting that
// rate; the metric Meta reports for DLRM) and calibration (predicted clicks over observed clicks).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/trainer/metric.h"

namespace kiln::metrics {
namespace {

// A batch's logits and labels as float64 [N], checked: one logit per label, labels 0 or 1.
struct Clicks {
  torch::Tensor logits, labels;
};
absl::StatusOr<Clicks> ClickRows(const MetricBatch& batch, const char* metric) {
  if (!batch.preds.defined() || !batch.target.defined() ||
      batch.preds.numel() != batch.target.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        metric, " needs one logit per label (a click task), got predictions ",
        batch.preds.defined() ? c10::str(batch.preds.sizes()) : "none", " for targets ",
        batch.target.defined() ? c10::str(batch.target.sizes()) : "none"));
  }
  Clicks c{batch.preds.detach().reshape({-1}).to(torch::kCPU, torch::kFloat64),
           batch.target.reshape({-1}).to(torch::kCPU, torch::kFloat64)};
  if (c.labels.numel() > 0 && (c.labels.ne(0) & c.labels.ne(1)).any().item<bool>())
    return absl::InvalidArgumentError(absl::StrCat(metric, " needs labels 0 or 1"));
  return c;
}

// Summed binary cross-entropy of the rows (stable in the logit).
double SummedLogLoss(const Clicks& c) {
  return torch::binary_cross_entropy_with_logits(c.logits, c.labels, {}, {}, at::Reduction::Sum)
      .item<double>();
}

struct AucOptions : MetricOptions {
  int64_t bins = 16384;
};

class Auc : public Metric {
 public:
  explicit Auc(const AucOptions& o)
      : Metric(o),
        positives_(torch::zeros({o.bins}, torch::kInt64)),
        negatives_(torch::zeros({o.bins}, torch::kInt64)) {
    AddState("positives", &positives_);
    AddState("negatives", &negatives_);
  }
  absl::Status Update(const MetricBatch& batch) override {
    KILN_ASSIGN_OR_RETURN(Clicks c, ClickRows(batch, "auc"));
    int64_t bins = positives_.size(0);
    torch::Tensor bin =
        (torch::sigmoid(c.logits) * static_cast<double>(bins)).to(torch::kInt64).clamp(0, bins - 1);
    torch::Tensor positive = c.labels.eq(1);
    positives_.index_add_(0, bin, positive.to(torch::kInt64));
    negatives_.index_add_(0, bin, positive.logical_not().to(torch::kInt64));
    return absl::OkStatus();
  }
  // The Mann-Whitney statistic over the bins: a positive above a negative counts 1, in the same
  // bin 1/2. No value while either class is absent.
  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>&) const override {
    torch::Tensor pos = positives_.to(torch::kFloat64), neg = negatives_.to(torch::kFloat64);
    double p = pos.sum().item<double>(), n = neg.sum().item<double>();
    if (p == 0 || n == 0) return MetricValues();
    torch::Tensor negatives_below = neg.cumsum(0) - neg;
    double pairs = (pos * (negatives_below + 0.5 * neg)).sum().item<double>();
    return MetricValues{{"", pairs / (p * n)}};
  }

 private:
  torch::Tensor positives_, negatives_;
};

// The state the other three share: rows, clicks, summed log loss, summed predicted probability.
class ClickSums : public Metric {
 public:
  explicit ClickSums(const MetricOptions& o, const char* name) : Metric(o), name_(name) {
    AddState("rows", &rows_);
    AddState("clicks", &clicks_);
    AddState("log_loss", &log_loss_);
    AddState("predicted", &predicted_);
  }
  absl::Status Update(const MetricBatch& batch) override {
    KILN_ASSIGN_OR_RETURN(Clicks c, ClickRows(batch, name_));
    rows_ += c.labels.numel();
    clicks_ += c.labels.sum();
    log_loss_ += SummedLogLoss(c);
    predicted_ += torch::sigmoid(c.logits).sum();
    return absl::OkStatus();
  }

 protected:
  double rows() const { return rows_.item<double>(); }
  double clicks() const { return clicks_.item<double>(); }
  double log_loss() const { return log_loss_.item<double>(); }
  double predicted() const { return predicted_.item<double>(); }

 private:
  const char* name_;
  torch::Tensor rows_ = torch::zeros({}, torch::kFloat64);
  torch::Tensor clicks_ = torch::zeros({}, torch::kFloat64);
  torch::Tensor log_loss_ = torch::zeros({}, torch::kFloat64);
  torch::Tensor predicted_ = torch::zeros({}, torch::kFloat64);
};

class LogLoss : public ClickSums {
 public:
  explicit LogLoss(const MetricOptions& o) : ClickSums(o, "log_loss") {}
  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>&) const override {
    if (rows() == 0) return MetricValues();
    return MetricValues{{"", log_loss() / rows()}};
  }
};

class NormalizedEntropy : public ClickSums {
 public:
  explicit NormalizedEntropy(const MetricOptions& o) : ClickSums(o, "normalized_entropy") {}
  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>&) const override {
    if (rows() == 0 || clicks() == 0 || clicks() == rows()) return MetricValues();
    double rate = clicks() / rows();
    double entropy = -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate));
    return MetricValues{{"", log_loss() / rows() / entropy}};
  }
};

class Calibration : public ClickSums {
 public:
  explicit Calibration(const MetricOptions& o) : ClickSums(o, "calibration") {}
  absl::StatusOr<MetricValues> Compute(const std::vector<std::string>&) const override {
    if (clicks() == 0) return MetricValues();
    return MetricValues{{"", predicted() / clicks()}};
  }
};

KILN_REGISTER_BOUND(Metric, "auc",
                    "Area under the ROC curve of a click task's predicted probabilities",
                    MetricOptionBinding<AucOptions>().Field(
                        "bins", &AucOptions::bins,
                        "histogram bins of the probability (pairs within a bin count 1/2)",
                        AtLeast(16)),
                    [](const AucOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<Auc>(o);
                    });

KILN_REGISTER_BOUND(Metric, "log_loss", "Mean binary cross-entropy of a click task's predictions",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<LogLoss>(o);
                    });

KILN_REGISTER_BOUND(
    Metric, "normalized_entropy",
    "Log loss over the entropy of the observed click rate (NE; < 1 beats predicting the rate)",
    MetricOptionBinding<MetricOptions>(),
    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
      return std::make_shared<NormalizedEntropy>(o);
    });

KILN_REGISTER_BOUND(Metric, "calibration",
                    "Predicted clicks over observed clicks (1 is calibrated)",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<Calibration>(o);
                    });

}  // namespace
}  // namespace kiln::metrics
