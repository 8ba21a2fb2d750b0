// `reduce_on_plateau`: cuts the lr by `factor` when the monitored metric stops improving for
// `patience` epochs (PyTorch's ReduceLROnPlateau, relative threshold, no cooldown).
#include <algorithm>
#include <cmath>
#include <limits>

#include "components/optim/lr_scheduler.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class ReduceOnPlateau : public LrScheduler {
 public:
  ReduceOnPlateau(Interval interval, std::string monitor, bool maximize, double factor,
                  int64_t patience, double threshold, double min_lr)
      : LrScheduler("reduce_on_plateau", interval),
        monitor_(std::move(monitor)),
        maximize_(maximize),
        factor_(factor),
        patience_(patience),
        threshold_(threshold),
        min_lr_(min_lr) {}

  std::string monitor() const override { return monitor_; }

 protected:
  // The rate depends on the metrics seen, not the step, so it is state.
  double LrAt(int64_t step, size_t group) const override { return lrs_[group]; }

  void OnStart() override {
    lrs_.clear();
    for (size_t i = 0; i < num_groups(); ++i) lrs_.push_back(base_lr(i));
    best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
    bad_epochs_ = 0;
  }

  void Observe(double metric) override {
    // NaN means no value this time (no validation ran), which is no evidence of a plateau.
    if (std::isnan(metric)) return;
    bool better = maximize_ ? metric > best_ * (threshold_ + 1) : metric < best_ * (1 - threshold_);
    if (better) {
      best_ = metric;
      bad_epochs_ = 0;
    } else {
      ++bad_epochs_;
    }
    if (bad_epochs_ <= patience_) return;
    for (double& lr : lrs_) {
      double reduced = std::max(lr * factor_, min_lr_);
      // PyTorch's eps: ignore cuts too small to matter once the rate is near min_lr.
      if (lr - reduced > 1e-8) lr = reduced;
    }
    bad_epochs_ = 0;
  }

  void SaveExtra(torch::serialize::OutputArchive& archive) const override {
    WriteDoubles(archive, "lrs", lrs_);
    WriteDoubles(archive, "best", {best_});
    WriteInt(archive, "bad_epochs", bad_epochs_);
  }

  void LoadExtra(torch::serialize::InputArchive& archive) override {
    std::vector<double> lrs = ReadDoubles(archive, "lrs");
    std::vector<double> best = ReadDoubles(archive, "best");
    TORCH_CHECK(lrs.size() == num_groups() && best.size() == 1,
                "reduce_on_plateau checkpoint is inconsistent");
    lrs_ = std::move(lrs);
    best_ = best[0];
    bad_epochs_ = ReadInt(archive, "bad_epochs");
  }

 private:
  std::string monitor_;
  bool maximize_;
  double factor_;
  int64_t patience_;
  double threshold_;
  double min_lr_;
  std::vector<double> lrs_;
  double best_ = 0;
  int64_t bad_epochs_ = 0;
};

struct ReduceOnPlateauOptions {
  std::string monitor = "val/loss";
  std::string mode = "min";
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  double min_lr = 0.0;
  std::string interval = "epoch";
};

// 0 < factor < 1: a cut that lowers the lr.
OptionCheck Between0And1() {
  return {"in (0, 1)", [above = GreaterThan(0), below = InHalfOpenRange(0, 1)](
                           const config::Node& n) { return above.accepts(n) && below.accepts(n); }};
}

KILN_REGISTER_BOUND(Scheduler, "reduce_on_plateau",
                    "Cuts the lr by a factor when a monitored metric stops improving",
                    OptionBinding<ReduceOnPlateauOptions>()
                        .Field("monitor", &ReduceOnPlateauOptions::monitor, "metric to watch")
                        .Field("mode", &ReduceOnPlateauOptions::mode,
                               "min: lower is better; max: higher is better", OneOf({"min", "max"}))
                        .Field("factor", &ReduceOnPlateauOptions::factor,
                               "factor applied to the lr at each cut", Between0And1())
                        .Field("patience", &ReduceOnPlateauOptions::patience,
                               "intervals without improvement tolerated before a cut", AtLeast(0))
                        .Field("threshold", &ReduceOnPlateauOptions::threshold,
                               "relative change that counts as an improvement", AtLeast(0))
                        .Field("min_lr", &ReduceOnPlateauOptions::min_lr,
                               "the lr is never cut below this", AtLeast(0))
                        .Field("interval", &ReduceOnPlateauOptions::interval,
                               "when the metric is checked: step or epoch", IntervalNames()),
                    [](const ReduceOnPlateauOptions& o)
                        -> absl::StatusOr<std::shared_ptr<Scheduler>> {
                      return std::make_shared<ReduceOnPlateau>(IntervalNamed(o.interval), o.monitor,
                                                               o.mode == "max", o.factor,
                                                               o.patience, o.threshold, o.min_lr);
                    });

}  // namespace
}  // namespace kiln
