// `linear`: scales the base lr by a factor moving linearly from start_factor to end_factor over
// total_steps, then held (PyTorch's LinearLR).
#include <algorithm>

#include "components/optim/lr_scheduler.h"
#include "components/optim/option_checks.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class LinearLr : public LrScheduler {
 public:
  LinearLr(Interval interval, Length length, double start_factor, double end_factor)
      : LrScheduler("linear", interval, std::move(length)),
        start_factor_(start_factor),
        end_factor_(end_factor) {}

 protected:
  // PyTorch's closed form, operation for operation.
  double LrAt(int64_t step, size_t group) const override {
    double done = static_cast<double>(std::min(step, length()));
    return base_lr(group) *
           (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(length()));
  }

 private:
  double start_factor_;
  double end_factor_;
};

absl::StatusOr<std::shared_ptr<Scheduler>> MakeLinearLr(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(Scheduler::Interval interval, GetInterval(cfg));
  KILN_ASSIGN_OR_RETURN(double start_factor, GetNonNegative(cfg, "start_factor"));
  KILN_ASSIGN_OR_RETURN(double end_factor, GetNonNegative(cfg, "end_factor"));
  KILN_ASSIGN_OR_RETURN(int64_t total, GetOptionalCount(cfg, "total_steps"));
  LrScheduler::Length length{/*needed=*/true, total, cfg.FullKey("total_steps")};
  return std::make_shared<LinearLr>(interval, std::move(length), start_factor, end_factor);
}

KILN_REGISTER(Scheduler, "linear", "Scales the lr linearly from start_factor to end_factor",
              OptionSchema()
                  .Float("start_factor", 1.0, "lr factor at the start")
                  .Float("end_factor", 0.0, "lr factor at the end and after")
                  .Add("total_steps", OptionType::kInt, "null",
                       "intervals to go from start to end (null: the run's planned length)")
                  .String("interval", "step", "what total_steps counts: step or epoch"),
              MakeLinearLr);

}  // namespace
}  // namespace kiln
