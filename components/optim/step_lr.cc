// `step`: multiplies the base lr by gamma every step_size intervals (PyTorch's StepLR).
#include <cmath>

#include "components/optim/lr_scheduler.h"
#include "components/optim/option_checks.h"
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

absl::StatusOr<std::shared_ptr<Scheduler>> MakeStepLr(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(Scheduler::Interval interval, GetInterval(cfg));
  KILN_ASSIGN_OR_RETURN(int64_t step_size, cfg.Get<int64_t>("step_size"));
  if (step_size <= 0) return BadOption(cfg, "step_size", "must be > 0");
  KILN_ASSIGN_OR_RETURN(double gamma, GetPositive(cfg, "gamma"));
  return std::make_shared<StepLr>(interval, step_size, gamma);
}

KILN_REGISTER(Scheduler, "step", "Decays the lr by gamma every step_size epochs (or steps)",
              OptionSchema()
                  .Required("step_size", OptionType::kInt, "intervals between decays")
                  .Float("gamma", 0.1, "factor applied at each decay")
                  .String("interval", "epoch", "what step_size counts: step or epoch"),
              MakeStepLr);

}  // namespace
}  // namespace kiln
