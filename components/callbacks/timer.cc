// timer (Lightning's Timer): stops training once a wall-clock duration has passed, checked after
// every training batch (interval: step, Lightning's default; the run stops after that optimizer
// step with a resumable last.ckpt) or at the end of every epoch (interval: epoch), and logs the
// elapsed training time. The duration counts the earlier runs of a resumed fit too.
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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
    Logger::Instance().Info(
        absl::StrFormat("timer: training took %.1f s", trainer.elapsed_seconds()));
    return absl::OkStatus();
  }

 private:
  std::string Reason(double elapsed) const {
    return absl::StrFormat("timer: %.1f s elapsed, the limit is %.1f s", elapsed, seconds_);
  }

  double seconds_;
  bool per_step_;
};

// "DD:HH:MM:SS" (Lightning's format), or a mapping {days, hours, minutes, seconds}, in seconds;
// nothing when the value is neither.
std::optional<double> DurationSeconds(const config::Node& duration) {
  const std::vector<std::pair<std::string, double>> units = {
      {"days", 86400}, {"hours", 3600}, {"minutes", 60}, {"seconds", 1}};
  double seconds = 0;
  if (duration.is_map()) {
    for (const auto& [key, value] : duration.entries()) {
      const std::string& name = key;  // (a structured binding cannot be captured in C++17)
      auto unit =
          std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == name; });
      bool number =
          value->kind() == config::NodeKind::kInt || value->kind() == config::NodeKind::kFloat;
      if (unit == units.end() || !number) return std::nullopt;
      double amount = value->kind() == config::NodeKind::kInt ? static_cast<double>(value->as_int())
                                                              : value->as_float();
      if (!(amount >= 0)) return std::nullopt;
      seconds += amount * unit->second;
    }
    return seconds;
  }
  if (duration.kind() != config::NodeKind::kString) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(duration.as_string(), ':');
  if (fields.size() != units.size()) return std::nullopt;
  for (size_t i = 0; i < fields.size(); ++i) {
    double value = 0;
    if (!absl::SimpleAtod(fields[i], &value) || !(value >= 0)) return std::nullopt;
    seconds += value * units[i].second;
  }
  return seconds;
}

OptionCheck Duration() {
  return {
      "\"DD:HH:MM:SS\" or {days, hours, minutes, seconds} (numbers >= 0), longer than 0 seconds",
      [](const config::Node& n) {
        std::optional<double> seconds = DurationSeconds(n);
        return seconds.has_value() && *seconds > 0;
      }};
}

struct TimerOptions {
  config::NodePtr duration;
  std::string interval = "step";
};

KILN_REGISTER_BOUND(
    Callback, "timer", "Stops training after a wall-clock duration; logs the elapsed time",
    OptionBinding<TimerOptions>()
        .RequiredNode("duration", &TimerOptions::duration, OptionType::kAny,
                      "\"DD:HH:MM:SS\" (e.g. \"00:12:00:00\") or {days, hours, minutes, seconds}",
                      Duration())
        .Field("interval", &TimerOptions::interval,
               "check after every step (stop mid-epoch) or every epoch", OneOf({"step", "epoch"})),
    [](const TimerOptions& o) -> absl::StatusOr<std::shared_ptr<Callback>> {
      return std::make_shared<Timer>(*DurationSeconds(*o.duration), o.interval == "step");
    });

}  // namespace
}  // namespace kiln
