// `linear`: scales the base lr by a factor moving linearly from start_factor to end_factor over
// total_steps, then held (PyTorch's LinearLR).
#include <algorithm>

#include "components/optim/lr_scheduler.h"
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

struct LinearLrOptions : AnnealingOptions {
  double start_factor = 1.0;
  double end_factor = 0.0;
};

KILN_REGISTER_BOUND(
    Scheduler, "linear", "Scales the lr linearly from start_factor to end_factor",
    AddAnnealingOptions(OptionBinding<LinearLrOptions>()
                            .Field("start_factor", &LinearLrOptions::start_factor,
                                   "lr factor at the start", AtLeast(0))
                            .Field("end_factor", &LinearLrOptions::end_factor,
                                   "lr factor at the end and after", AtLeast(0)),
                        "intervals to go from start to end (null: the run's planned length)",
                        "what total_steps counts: step or epoch"),
    [](const LinearLrOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Scheduler>> {
      return std::make_shared<LinearLr>(IntervalNamed(o.interval), o.length(context),
                                        o.start_factor, o.end_factor);
    });

}  // namespace
}  // namespace kiln
