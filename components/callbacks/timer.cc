// timer (Lightning's Timer): stops training once a wall-clock duration has passed, checked after
// every training batch (interval: step, Lightning's default; the run stops after that optimizer step
// with a resumable last.ckpt) or at the end of every epoch (interval: epoch), and logs the elapsed
// training time. The duration counts the earlier runs of a resumed fit too.
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "components/optim/option_checks.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

class Timer : public Callback {
 public:
  Timer(double seconds, bool per_step) : seconds_(seconds), per_step_(per_step) {}

  absl::Status OnTrainBatchEnd(Trainer& trainer, const data::Batch&, double) override {
    double elapsed = trainer.elapsed_seconds();
    if (per_step_ && elapsed >= seconds_) trainer.RequestStopNow(Reason(elapsed));
    return absl::OkStatus();
  }

  absl::Status OnTrainEpochEnd(Trainer& trainer) override {
    double elapsed = trainer.elapsed_seconds();
    trainer.LogMetrics({{"time/elapsed_seconds", elapsed}});
    if (elapsed >= seconds_) trainer.RequestStop(Reason(elapsed));
    return absl::OkStatus();
  }

  absl::Status OnFitEnd(Trainer& trainer) override {
    Logger::Instance().Info(absl::StrFormat("timer: training took %.1f s", trainer.elapsed_seconds()));
    return absl::OkStatus();
  }

 private:
  std::string Reason(double elapsed) const {
    return absl::StrFormat("timer: %.1f s elapsed, the limit is %.1f s", elapsed, seconds_);
  }

  double seconds_;
  bool per_step_;
};

// "DD:HH:MM:SS" (Lightning's format), or a mapping {days, hours, minutes, seconds}.
absl::StatusOr<double> DurationSeconds(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, cfg.Get<config::NodePtr>("duration"));
  double seconds = 0;
  const std::vector<std::pair<std::string, double>> units = {
      {"days", 86400}, {"hours", 3600}, {"minutes", 60}, {"seconds", 1}};
  if (node->is_map()) {
    KILN_ASSIGN_OR_RETURN(config::Config parts, cfg.Sub("duration"));
    for (const auto& key : parts.Keys()) {
      auto unit = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == key; });
      if (unit == units.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown key '", parts.FullKey(key),
                                                       "' in a duration (days, hours, minutes, seconds)"));
      }
      KILN_ASSIGN_OR_RETURN(double value, GetNonNegative(parts, key));
      seconds += value * unit->second;
    }
  } else {
    KILN_ASSIGN_OR_RETURN(std::string text, cfg.Get<std::string>("duration"));
    std::vector<std::string> fields = absl::StrSplit(text, ':');
    bool ok = fields.size() == 4;
    for (size_t i = 0; ok && i < fields.size(); ++i) {
      double value = 0;
      ok = absl::SimpleAtod(fields[i], &value) && value >= 0;
      seconds += value * units[i].second;
    }
    if (!ok) return BadOption(cfg, "duration", "must be \"DD:HH:MM:SS\" or {days, hours, minutes, seconds}");
  }
  if (!(seconds > 0)) return BadOption(cfg, "duration", "must be longer than 0 seconds");
  return seconds;
}

KILN_REGISTER(Callback, "timer", "Stops training after a wall-clock duration; logs the elapsed time",
              OptionSchema()
                  .Required("duration", OptionType::kAny,
                            "\"DD:HH:MM:SS\" (e.g. \"00:12:00:00\") or {days, hours, minutes, seconds}")
                  .String("interval", "step", "check after every step (stop mid-epoch) or every epoch"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Callback>> {
                KILN_ASSIGN_OR_RETURN(double seconds, DurationSeconds(cfg));
                KILN_ASSIGN_OR_RETURN(std::string interval, cfg.Get<std::string>("interval"));
                if (interval != "step" && interval != "epoch") return BadOption(cfg, "interval", "must be step or epoch");
                return std::make_shared<Timer>(seconds, interval == "step");
              });

}  // namespace
}  // namespace kiln
