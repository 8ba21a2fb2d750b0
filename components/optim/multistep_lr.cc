// `multistep`: multiplies the base lr by gamma at each milestone (PyTorch's MultiStepLR).
#include <algorithm>
#include <cmath>

#include "components/optim/lr_scheduler.h"
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

struct MultiStepLrOptions {
  std::vector<int64_t> milestones;
  double gamma = 0.1;
  std::string interval = "epoch";
};

KILN_REGISTER_BOUND(Scheduler, "multistep",
                    "Decays the lr by gamma at each milestone epoch (or step)",
                    OptionBinding<MultiStepLrOptions>()
                        .Required("milestones", &MultiStepLrOptions::milestones,
                                  "intervals at which to decay", Each(AtLeast(0)))
                        .Field("gamma", &MultiStepLrOptions::gamma,
                               "factor applied at each milestone", GreaterThan(0))
                        .Field("interval", &MultiStepLrOptions::interval,
                               "what milestones count: step or epoch", IntervalNames()),
                    [](const MultiStepLrOptions& o) -> absl::StatusOr<std::shared_ptr<Scheduler>> {
                      return std::make_shared<MultiStepLr>(IntervalNamed(o.interval), o.milestones,
                                                           o.gamma);
                    });

}  // namespace
}  // namespace kiln
