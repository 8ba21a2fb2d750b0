// `cosine_with_warmup`: linear warmup from 0 to the base lr, then cosine annealing to min_lr
// (the schedule of transformers' get_cosine_schedule_with_warmup, with a floor).
#include <algorithm>
#include <cmath>

#include "components/optim/lr_scheduler.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class CosineWithWarmup : public LrScheduler {
 public:
  CosineWithWarmup(Interval interval, Length length, int64_t warmup, double min_lr)
      : LrScheduler("cosine_with_warmup", interval, std::move(length)),
        warmup_(warmup),
        min_lr_(min_lr) {}

 protected:
  double LrAt(int64_t step, size_t group) const override {
    double base = base_lr(group);
    if (step < warmup_) return base * (static_cast<double>(step) / static_cast<double>(warmup_));
    double progress = static_cast<double>(step - warmup_) /
                      static_cast<double>(std::max<int64_t>(1, length() - warmup_));
    // Past the planned end the rate stays at min_lr instead of climbing back up the cosine.
    progress = std::min(progress, 1.0);
    return min_lr_ + (base - min_lr_) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }

 private:
  int64_t warmup_;
  double min_lr_;
};

struct CosineWithWarmupOptions : AnnealingOptions {
  int64_t warmup_steps = 0;
  double min_lr = 0.0;
};

KILN_REGISTER_BOUND(
    Scheduler, "cosine_with_warmup",
    "Linear warmup from 0, then cosine annealing from the base lr to min_lr",
    AddAnnealingOptions(OptionBinding<CosineWithWarmupOptions>()
                            .Field("warmup_steps", &CosineWithWarmupOptions::warmup_steps,
                                   "intervals of linear warmup", AtLeast(0))
                            .Field("min_lr", &CosineWithWarmupOptions::min_lr,
                                   "lr at the end of the schedule", AtLeast(0)),
                        "length of the schedule, warmup included (null: the run's planned length)",
                        "what the counts count: step or epoch"),
    [](const CosineWithWarmupOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Scheduler>> {
      return std::make_shared<CosineWithWarmup>(IntervalNamed(o.interval), o.length(context),
                                                o.warmup_steps, o.min_lr);
    });

}  // namespace
}  // namespace kiln
