// `one_cycle`: the 1cycle policy of PyTorch's OneCycleLR (two phases, cosine annealing, no
// momentum cycling): up from max_lr/div_factor to max_lr, then down to a far smaller floor.
#include <algorithm>
#include <cmath>

#include "components/optim/lr_scheduler.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class OneCycle : public LrScheduler {
 public:
  OneCycle(Interval interval, Length length, double max_lr, double pct_start, double div_factor,
           double final_div_factor)
      : LrScheduler("one_cycle", interval, std::move(length)),
        max_lr_(max_lr),
        pct_start_(pct_start),
        initial_lr_(max_lr / div_factor),
        min_lr_(max_lr / div_factor / final_div_factor) {}

 protected:
  // The rates come from max_lr alone; the optimizer's own lr is ignored, as in PyTorch.
  double LrAt(int64_t step, size_t group) const override {
    // PyTorch raises past the last step; holding the final rate is kinder to a trainer that
    // steps the scheduler once more after the last optimizer step.
    double n = static_cast<double>(std::min(step, length() - 1));
    double warm_end = pct_start_ * static_cast<double>(length()) - 1;
    double last = static_cast<double>(length() - 1);
    if (n <= warm_end) return Anneal(initial_lr_, max_lr_, Fraction(n, 0, warm_end));
    return Anneal(max_lr_, min_lr_, Fraction(n, warm_end, last));
  }

 private:
  static double Fraction(double n, double start, double end) {
    // A phase of no length (pct_start * total == 1, or pct_start == 1) is already complete.
    return end == start ? 1.0 : (n - start) / (end - start);
  }
  static double Anneal(double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
  }

  double max_lr_;
  double pct_start_;
  double initial_lr_;
  double min_lr_;
};

struct OneCycleOptions : AnnealingOptions {
  double max_lr = 0;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
};

KILN_REGISTER_BOUND(
    Scheduler, "one_cycle",
    "1cycle: cosine up to max_lr over pct_start of the run, then down to a low floor",
    AddAnnealingOptions(OptionBinding<OneCycleOptions>()
                            .Required("max_lr", &OneCycleOptions::max_lr, "peak learning rate",
                                      GreaterThan(0))
                            .Field("pct_start", &OneCycleOptions::pct_start,
                                   "fraction of the run spent increasing the lr", InRange(0, 1))
                            .Field("div_factor", &OneCycleOptions::div_factor,
                                   "initial lr = max_lr / div_factor", GreaterThan(0))
                            .Field("final_div_factor", &OneCycleOptions::final_div_factor,
                                   "final lr = initial lr / final_div_factor", GreaterThan(0)),
                        "length of the cycle (null: the run's planned length)",
                        "what the cycle counts: step or epoch"),
    [](const OneCycleOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Scheduler>> {
      return std::make_shared<OneCycle>(IntervalNamed(o.interval), o.length(context), o.max_lr,
                                        o.pct_start, o.div_factor, o.final_div_factor);
    });

}  // namespace
}  // namespace kiln
