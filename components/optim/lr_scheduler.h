// The part every kiln lr schedule shares: base lrs taken at Attach, a counter Step advances, the
// schedule's length, and a checkpoint of all three, so a schedule only says what the lr is after
// n steps (or epochs).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/registry/options.h"
#include "lib/trainer/optimization.h"

namespace kiln {

class LrScheduler : public Scheduler {
 public:
  // How long the schedule runs, for schedules that anneal towards an end.
  struct Length {
    bool needed = false;
    int64_t fixed = 0;   // from a `total_steps` option; 0 takes the length from Attach
    std::string option;  // the option's full key, for the message when no length is known
  };

  LrScheduler(std::string name, Interval interval, Length length);
  LrScheduler(std::string name, Interval interval);

  // Counts are in units of interval(): with `epoch`, the length Attach derives is
  // ceil(total_steps / steps_per_epoch) epochs. After Load, Attach keeps the loaded state.
  absl::Status Attach(torch::optim::Optimizer* optimizer, int64_t total_steps,
                      int64_t steps_per_epoch) final;
  void Step(double metric) final;
  Interval interval() const final { return interval_; }
  // A group added after Attach follows the schedule of group 0 scaled by its base rate over group
  // 0's (so every schedule, one_cycle and reduce_on_plateau included, keeps the group's factor).
  void OnParamGroupAdded(double base_lr) final;

  // Writes "step", "base_lrs" and "length" (tensors) plus what SaveExtra adds. Load restores them
  // and, when attached, sets the lrs for the restored step at once.
  void Save(torch::serialize::OutputArchive& archive) const final;
  void Load(torch::serialize::InputArchive& archive) final;

 protected:
  // The lr of `group` after `step` intervals.
  virtual double LrAt(int64_t step, size_t group) const = 0;
  // Called by Step after the counter moves, before the lrs are set (plateau schedules decide
  // here whether to cut the rate).
  virtual void Observe(double metric) {}
  // Called when Attach starts a fresh schedule (not one restored by Load).
  virtual void OnStart() {}
  virtual void SaveExtra(torch::serialize::OutputArchive& archive) const {}
  virtual void LoadExtra(torch::serialize::InputArchive& archive) {}

  double base_lr(size_t group) const { return base_lrs_[group]; }
  size_t num_groups() const { return base_lrs_.size(); }
  int64_t length() const { return length_; }

 private:
  void ApplyLrs();

  std::string name_;
  Interval interval_;
  Length length_option_;
  torch::optim::Optimizer* optimizer_ = nullptr;
  std::vector<double> base_lrs_;
  size_t attached_groups_ = 0;  // the groups the optimizer had at Attach; later ones were added
  int64_t step_ = 0;
  int64_t length_ = 0;
  bool restored_ = false;
};

// The `interval` option every schedule declares: "step" or "epoch".
OptionCheck IntervalNames();
Scheduler::Interval IntervalNamed(const std::string& interval);

// The options of a schedule that anneals towards an end: its length and what it counts. A
// schedule's options struct derives from this one.
struct AnnealingOptions {
  std::optional<int64_t> total_steps;  // null: the run's planned length, which Attach then requires
  std::string interval = "step";

  LrScheduler::Length length(const OptionContext& context) const {
    return {/*needed=*/true, total_steps.value_or(0), context.FullKey("total_steps")};
  }
};

// Declares total_steps and interval on S, after the options `binding` already has.
template <typename S>
OptionBinding<S> AddAnnealingOptions(OptionBinding<S> binding, std::string total_steps_doc,
                                     std::string interval_doc) {
  static_assert(std::is_base_of_v<AnnealingOptions, S>);
  return binding
      .Field("total_steps",
             static_cast<std::optional<int64_t> S::*>(&AnnealingOptions::total_steps),
             std::move(total_steps_doc), GreaterThan(0))
      .Field("interval", static_cast<std::string S::*>(&AnnealingOptions::interval),
             std::move(interval_doc), IntervalNames());
}

// Checkpoint values kept as tensors: float64 holds every double exactly, int64 every counter.
void WriteInt(torch::serialize::OutputArchive& archive, const std::string& key, int64_t value);
int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key);
void WriteDoubles(torch::serialize::OutputArchive& archive, const std::string& key,
                  const std::vector<double>& values);
std::vector<double> ReadDoubles(torch::serialize::InputArchive& archive, const std::string& key);

}  // namespace kiln
