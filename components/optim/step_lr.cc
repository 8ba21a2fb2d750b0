// `step`: multiplies the base lr by gamma every step_size intervals (PyTorch's StepLR).
#include <cmath>

#include "components/optim/lr_scheduler.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class StepLr : public LrScheduler {
 public:
  StepLr(Interval interval, int64_t step_size, double gamma)
      : LrScheduler("step", interval), step_size_(step_size), gamma_(gamma) {}

 protected:
  // Closed form rather than repeated multiplication, so resumed and uninterrupted runs agree.
  double LrAt(int64_t step, size_t group) const override {
    return base_lr(group) * std::pow(gamma_, static_cast<double>(step / step_size_));
  }

 private:
  int64_t step_size_;
  double gamma_;
};

struct StepLrOptions {
  int64_t step_size = 0;
  double gamma = 0.1;
  std::string interval = "epoch";
};

KILN_REGISTER_BOUND(
    Scheduler, "step", "Decays the lr by gamma every step_size epochs (or steps)",
    OptionBinding<StepLrOptions>()
        .Required("step_size", &StepLrOptions::step_size, "intervals between decays", AtLeast(1))
        .Field("gamma", &StepLrOptions::gamma, "factor applied at each decay", GreaterThan(0))
        .Field("interval", &StepLrOptions::interval, "what step_size counts: step or epoch",
               IntervalNames()),
    [](const StepLrOptions& o) -> absl::StatusOr<std::shared_ptr<Scheduler>> {
      return std::make_shared<StepLr>(IntervalNamed(o.interval), o.step_size, o.gamma);
    });

}  // namespace
}  // namespace kiln
