// How a trial of an Optuna sweep talks to the sweeper that started it: through files in a folder
// the sweeper names (SWEEP_DIR/.optuna/TRIAL), so the trial may run in the sweeper's process, in
// a child process, or on another host that shares the folder. The trial appends one line per
// validation (and one with its test metrics) to reports.jsonl; under pruning it then waits for
// the sweeper's answer to that report (answer.K: "prune" or "continue"). The sweeper reads the
// reports for the objective and relays the validation ones to the study's pruner.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::sweep {

// The exit code of a trial its study pruned (1 is a failure, 2 a user mistake).
inline constexpr int kExitTrialPruned = 3;

struct TrialReport {
  std::string stage;  // "val" or "test"
  int64_t step = 0;   // the optimizer step it was taken at
  std::map<std::string, double> metrics;
};

// The trial's side.
class TrialChannel {
 public:
  // `pruning`: wait for the sweeper's answer after each validation report, at most
  // `answer_timeout_s` (then go on, with a warning).
  TrialChannel(std::string dir, bool pruning, double answer_timeout_s = 300);
  // Records a report; true when the sweeper answers that the study prunes the trial.
  absl::StatusOr<bool> Report(const TrialReport& report);

 private:
  std::string dir_;
  bool pruning_;
  double answer_timeout_s_;
  int64_t reports_ = 0;
};

// The sweeper's side: every complete report line so far.
absl::StatusOr<std::vector<TrialReport>> ReadTrialReports(const std::string& dir);
// Answers report number `k` (counting from 0) of the trial.
absl::Status AnswerTrialReport(const std::string& dir, int64_t k, bool prune);
// The override that adds the reporting callback to a trial's job.
std::string TrialChannelOverride(const std::string& dir, bool pruning);

}  // namespace kiln::sweep
