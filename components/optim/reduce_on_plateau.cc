// `reduce_on_plateau`: cuts the lr by `factor` when the monitored metric stops improving for
// `patience` epochs (PyTorch's ReduceLROnPlateau, relative threshold, no cooldown).
#include <algorithm>
#include <cmath>
#include <limits>

#include "components/optim/lr_scheduler.h"
#include "components/optim/option_checks.h"
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

absl::StatusOr<std::shared_ptr<Scheduler>> MakeReduceOnPlateau(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(Scheduler::Interval interval, GetInterval(cfg));
  KILN_ASSIGN_OR_RETURN(std::string monitor, cfg.Get<std::string>("monitor"));
  KILN_ASSIGN_OR_RETURN(std::string mode, cfg.Get<std::string>("mode"));
  if (mode != "min" && mode != "max") return BadOption(cfg, "mode", "must be min or max");
  KILN_ASSIGN_OR_RETURN(double factor, cfg.Get<double>("factor"));
  if (!(factor > 0 && factor < 1)) return BadOption(cfg, "factor", "must be in (0, 1)");
  KILN_ASSIGN_OR_RETURN(int64_t patience, cfg.Get<int64_t>("patience"));
  if (patience < 0) return BadOption(cfg, "patience", "must be >= 0");
  KILN_ASSIGN_OR_RETURN(double threshold, GetNonNegative(cfg, "threshold"));
  KILN_ASSIGN_OR_RETURN(double min_lr, GetNonNegative(cfg, "min_lr"));
  return std::make_shared<ReduceOnPlateau>(interval, monitor, mode == "max", factor, patience,
                                           threshold, min_lr);
}

KILN_REGISTER(Scheduler, "reduce_on_plateau",
              "Cuts the lr by a factor when a monitored metric stops improving",
              OptionSchema()
                  .String("monitor", "val/loss", "metric to watch")
                  .String("mode", "min", "min: lower is better; max: higher is better")
                  .Float("factor", 0.1, "factor applied to the lr at each cut")
                  .Int("patience", 10, "intervals without improvement tolerated before a cut")
                  .Float("threshold", 1e-4, "relative change that counts as an improvement")
                  .Float("min_lr", 0.0, "the lr is never cut below this")
                  .String("interval", "epoch", "when the metric is checked: step or epoch"),
              MakeReduceOnPlateau);

}  // namespace
}  // namespace kiln
