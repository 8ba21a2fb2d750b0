// optuna_trial: the trial's side of an Optuna sweep (lib/sweep/trial_channel.h). The optuna sweeper
// adds it to each trial's job (`++callbacks.optuna_trial={...}`); it reports the validation
// metrics after every validation and the test metrics at the end. When the study's pruner stops
// the trial, the fit ends after that step (a resumable last.ckpt written, its checkpoints and logs
// kept) and the job exits with code 3 (kExitTrialPruned), which tells a pruned trial from a failed
// one.
#include "absl/strings/str_cat.h"
#include "lib/base/exit_code.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/sweep/trial_channel.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

struct OptunaTrialOptions {
  std::string channel;   // the folder the sweeper reads
  bool pruning = false;  // wait for the sweeper's answer after each validation
};

class OptunaTrial : public Callback {
 public:
  explicit OptunaTrial(const OptunaTrialOptions& o) : channel_(o.channel, o.pruning) {}

  std::string state_key() const override { return "OptunaTrial"; }

  absl::Status OnValidationEnd(Trainer& trainer,
                               const std::map<std::string, double>& metrics) override {
    if (!trainer.is_global_zero() || trainer.global_step() == 0)
      return absl::OkStatus();  // not the sanity check
    auto prune = channel_.Report({"val", trainer.global_step(), metrics});
    if (!prune.ok()) return prune.status();
    if (*prune && pruned_step_ < 0) {
      pruned_step_ = trainer.global_step();
      std::string why = absl::StrCat("the Optuna study pruned this trial at step ", pruned_step_);
      Logger::Instance().Info(absl::StrCat(why, "; the fit stops after this step (exit code ",
                                           sweep::kExitTrialPruned, ")"));
      // At once, as Optuna's own pruning callbacks stop a trial: a trial of one epoch that
      // validates four times is pruned at the first validation that falls below the median.
      trainer.RequestStopNow(why);
    }
    return absl::OkStatus();
  }

  absl::Status OnTestEnd(Trainer& trainer, const std::map<std::string, double>& metrics) override {
    if (!trainer.is_global_zero()) return absl::OkStatus();
    return channel_.Report({"test", trainer.global_step(), metrics}).status();
  }

  absl::Status OnFitEnd(Trainer&) override {
    if (pruned_step_ < 0) return absl::OkStatus();
    return WithExitCode(
        absl::AbortedError(absl::StrCat("trial pruned by the Optuna study at step ", pruned_step_)),
        sweep::kExitTrialPruned);
  }

 private:
  sweep::TrialChannel channel_;
  int64_t pruned_step_ = -1;
};

KILN_REGISTER_BOUND(Callback, "optuna_trial",
                    "Reports a trial's metrics to the Optuna sweep that started it",
                    OptionBinding<OptunaTrialOptions>()
                        .Field("channel", &OptunaTrialOptions::channel,
                               "the folder the sweeper reads (it sets this)", NonEmpty())
                        .Field("pruning", &OptunaTrialOptions::pruning,
                               "wait for the pruner's answer after each validation"),
                    [](const OptunaTrialOptions& o) -> absl::StatusOr<std::shared_ptr<Callback>> {
                      return std::make_shared<OptunaTrial>(o);
                    });

}  // namespace
}  // namespace kiln
