// `multistep`: multiplies the base lr by gamma at each milestone (PyTorch's MultiStepLR).
#include <algorithm>
#include <cmath>

#include "components/optim/lr_scheduler.h"
#include "components/optim/option_checks.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class MultiStepLr : public LrScheduler {
 public:
  MultiStepLr(Interval interval, std::vector<int64_t> milestones, double gamma)
      : LrScheduler("multistep", interval), milestones_(std::move(milestones)), gamma_(gamma) {
    std::sort(milestones_.begin(), milestones_.end());
  }

 protected:
  // A milestone listed twice decays twice, as in PyTorch.
  double LrAt(int64_t step, size_t group) const override {
    auto passed =
        std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
    return base_lr(group) * std::pow(gamma_, static_cast<double>(passed));
  }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

absl::StatusOr<std::shared_ptr<Scheduler>> MakeMultiStepLr(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(Scheduler::Interval interval, GetInterval(cfg));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> milestones,
                        cfg.Get<std::vector<int64_t>>("milestones"));
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 0) return BadOption(cfg, "milestones." + std::to_string(i), "must be >= 0");
  }
  KILN_ASSIGN_OR_RETURN(double gamma, GetPositive(cfg, "gamma"));
  return std::make_shared<MultiStepLr>(interval, std::move(milestones), gamma);
}

KILN_REGISTER(Scheduler, "multistep", "Decays the lr by gamma at each milestone epoch (or step)",
              OptionSchema()
                  .Required("milestones", OptionType::kList, "intervals at which to decay")
                  .Float("gamma", 0.1, "factor applied at each milestone")
                  .String("interval", "epoch", "what milestones count: step or epoch"),
              MakeMultiStepLr);

}  // namespace
}  // namespace kiln
