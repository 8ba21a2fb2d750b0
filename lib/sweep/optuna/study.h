// Where an Optuna sweep's study lives and what it optimizes, recorded in SWEEP_DIR/study.yaml when
// the sweep opens it, and the study's trials as kiln reads them back. The study is the record of
// a sweep (other processes may share it), so `kiln report` and `kiln dashboard` read trial states
// from it through the Optuna helper; summary.csv is the fallback when the study cannot be read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/node.h"

namespace kiln::sweep {

struct StudyRecord {
  std::string storage;        // a database URL
  bool in_sweep_dir = false;  // storage was null: SWEEP_DIR/optuna.db, wherever the folder is now
  std::string study_name;
  std::vector<std::string> objectives;
  std::vector<std::string> directions;  // minimize / maximize, one per objective
  std::vector<std::string>
      direction_from;  // why, one per objective: "callbacks.model_checkpoint.mode=max"
  std::string python;  // hydra.sweeper.python ("": DefaultOptunaPython())
};

absl::Status WriteStudyRecord(const std::string& sweep_dir, const StudyRecord& record);
// NotFound when the sweep has no study.yaml (a grid sweep, or one from before kiln wrote it).
absl::StatusOr<StudyRecord> ReadStudyRecord(const std::string& sweep_dir);

// One trial of a study, as the helper's `trials` reply lists it.
struct StudyTrial {
  int64_t number = 0;
  std::string state;  // COMPLETE, PRUNED, FAIL, FAIL(abandoned), RUNNING, WAITING
  std::vector<double> values;
  std::optional<double> seconds;
  std::map<std::string, std::string> params;  // as override text
  std::string dir;
};

// The trials of a `trials` reply, with at most `objectives` values each.
std::vector<StudyTrial> ParseStudyTrials(const config::NodePtr& reply, size_t objectives);

// The study's trials now. Starts the helper (Python and Optuna, about a second); for a SQLite
// study the answer is kept until the file changes, so a dashboard that redraws every few seconds
// does not start Python each time. An error says why the study could not be read.
absl::StatusOr<std::vector<StudyTrial>> ReadStudyTrials(const std::string& sweep_dir,
                                                        const StudyRecord& record);

// The Python the Optuna helper runs on when none is named: $KILN_PYTHON, else the virtual
// environment kiln was built with (scripts/setup_venv.sh test gives it Optuna), else python3.
std::string DefaultOptunaPython();

}  // namespace kiln::sweep
