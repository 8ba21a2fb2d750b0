// EarlyStopping (Lightning's): stops training when a validation metric has not improved by
// min_delta for `patience` validations in a row.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

class EarlyStopping : public Callback {
 public:
  EarlyStopping(std::string monitor, bool maximize, int64_t patience, double min_delta)
      : monitor_(std::move(monitor)),
        maximize_(maximize),
        patience_(patience),
        min_delta_(std::abs(min_delta)) {}

  std::string state_key() const override {
    return absl::StrCat("EarlyStopping{monitor=", monitor_, ",mode=", maximize_ ? "max" : "min",
                        "}");
  }

  absl::Status OnValidationEnd(Trainer& trainer,
                               const std::map<std::string, double>& metrics) override {
    auto it = metrics.find(monitor_);
    if (it == metrics.end()) {
      return absl::InvalidArgumentError(absl::StrCat("callbacks.early_stopping.monitor='", monitor_,
                                                     "' is not a validation metric"));
    }
    double v = it->second;
    bool improved =
        std::isnan(best_) || (maximize_ ? v > best_ + min_delta_ : v < best_ - min_delta_);
    if (improved) {
      best_ = v;
      wait_ = 0;
    } else if (++wait_ >= patience_) {
      std::string reason = absl::StrCat("early stopping: ", monitor_, " did not improve for ",
                                        wait_, " validations (best ", best_, ")");
      // A validation within the epoch (val_check_interval) stops training there, as Lightning's
      // should_stop ends its epoch loop; one at the epoch's end stops after the epoch.
      if (trainer.batch_in_epoch() < trainer.train_batches_per_epoch()) {
        trainer.RequestStopNow(reason);
      } else {
        trainer.RequestStop(reason);
      }
    }
    return absl::OkStatus();
  }

  void SaveState(torch::serialize::OutputArchive& archive) const override {
    archive.write("best", c10::IValue(best_));
    archive.write("wait", c10::IValue(wait_));
  }
  void LoadState(torch::serialize::InputArchive& archive) override {
    c10::IValue best, wait;
    if (archive.try_read("best", best)) best_ = best.toDouble();
    if (archive.try_read("wait", wait)) wait_ = wait.toInt();
  }

 private:
  std::string monitor_;
  bool maximize_;
  int64_t patience_;
  double min_delta_;
  double best_ = std::nan("");
  int64_t wait_ = 0;
};

struct EarlyStoppingOptions {
  std::string monitor;
  std::string mode = "min";
  int64_t patience = 3;
  double min_delta = 0.0;
};

KILN_REGISTER_BOUND(Callback, "early_stopping", "Stops when a validation metric stops improving",
                    OptionBinding<EarlyStoppingOptions>()
                        .Required("monitor", &EarlyStoppingOptions::monitor,
                                  "validation metric to watch, e.g. val/loss")
                        .Field("mode", &EarlyStoppingOptions::mode,
                               "min or max: which direction is better", OneOf({"min", "max"}))
                        .Field("patience", &EarlyStoppingOptions::patience,
                               "validations without improvement before stopping")
                        .Field("min_delta", &EarlyStoppingOptions::min_delta,
                               "smallest change that counts as an improvement"),
                    [](const EarlyStoppingOptions& o) -> absl::StatusOr<std::shared_ptr<Callback>> {
                      return std::make_shared<EarlyStopping>(o.monitor, o.mode == "max", o.patience,
                                                             o.min_delta);
                    });

}  // namespace
}  // namespace kiln
