// `one_cycle`: the 1cycle policy of PyTorch's OneCycleLR (two phases, cosine annealing, no
// momentum cycling): up from max_lr/div_factor to max_lr, then down to a far smaller floor.
#include <algorithm>
#include <cmath>

#include "components/optim/lr_scheduler.h"
#include "components/optim/option_checks.h"
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

absl::StatusOr<std::shared_ptr<Scheduler>> MakeOneCycle(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(Scheduler::Interval interval, GetInterval(cfg));
  KILN_ASSIGN_OR_RETURN(double max_lr, GetPositive(cfg, "max_lr"));
  KILN_ASSIGN_OR_RETURN(double pct_start, cfg.Get<double>("pct_start"));
  if (!(pct_start >= 0 && pct_start <= 1)) return BadOption(cfg, "pct_start", "must be in [0, 1]");
  KILN_ASSIGN_OR_RETURN(double div_factor, GetPositive(cfg, "div_factor"));
  KILN_ASSIGN_OR_RETURN(double final_div_factor, GetPositive(cfg, "final_div_factor"));
  KILN_ASSIGN_OR_RETURN(int64_t total, GetOptionalCount(cfg, "total_steps"));
  LrScheduler::Length length{/*needed=*/true, total, cfg.FullKey("total_steps")};
  return std::make_shared<OneCycle>(interval, std::move(length), max_lr, pct_start, div_factor,
                                    final_div_factor);
}

KILN_REGISTER(Scheduler, "one_cycle",
              "1cycle: cosine up to max_lr over pct_start of the run, then down to a low floor",
              OptionSchema()
                  .Required("max_lr", OptionType::kFloat, "peak learning rate")
                  .Float("pct_start", 0.3, "fraction of the run spent increasing the lr")
                  .Float("div_factor", 25.0, "initial lr = max_lr / div_factor")
                  .Float("final_div_factor", 1e4, "final lr = initial lr / final_div_factor")
                  .Add("total_steps", OptionType::kInt, "null",
                       "length of the cycle (null: the run's planned length)")
                  .String("interval", "step", "what the cycle counts: step or epoch"),
              MakeOneCycle);

}  // namespace
}  // namespace kiln
