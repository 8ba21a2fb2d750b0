// Reads what kiln's runs and sweeps leave on disk, for `kiln report`: run directories (metrics.csv,
// test_metrics.yaml, .hydra/, confusion matrices, train.log, checkpoints/) and sweep directories
// (multirun.yaml, ledger.yaml, summary.csv of a grid or an Optuna sweep). What cannot be read is
// noted and skipped, never fatal: a report of a half-written run still renders.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/report/downsample.h"

namespace kiln::report {

struct Table {  // a small CSV: confusion matrix, per-class metrics
  std::string name;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

struct Checkpoint {
  std::string path;  // absolute
  int64_t bytes = 0;
};

struct Run {
  std::string dir;                       // absolute
  std::string name;                      // relative to the folder given on the command line
  std::string status;                    // "complete", "failed", "pruned", "incomplete", ...
  std::vector<std::string> overrides;    // .hydra/overrides.yaml (or the sweep's ledger)
  std::map<std::string, Series> series;  // metrics.csv, a column each (not `step`)
  std::map<std::string, double> test_metrics;
  std::vector<Table> confusion_matrices;
  std::vector<Table> per_class;
  std::vector<std::pair<std::string, std::string>> config;  // .hydra/config.yaml, flattened
  std::vector<Checkpoint> checkpoints;
  std::optional<double> wall_seconds;
  std::optional<double> samples_per_second;  // train.log's "fit done: ... N samples in T s"
  std::vector<std::string> notes;            // what was skipped or looks wrong
};

struct Trial {  // one job of a sweep, as the sweep recorded it
  int64_t number = 0;
  std::string state;           // ok / failed (grid), COMPLETE / PRUNED / FAIL (Optuna)
  std::vector<double> values;  // the objectives (Optuna)
  std::map<std::string, std::string> params;
  std::optional<double> seconds;
  std::string dir;
  int run = -1;  // index into Collection::runs, -1 when it left no run
};

// One swept parameter as the sweep's multirun.yaml defines it (hydra.sweeper.params, then the
// command line's sweeps in hydra.overrides.task): what the page needs to lay out its axis.
struct SweptParam {
  std::string name;                  // the key as trials name it ("optimizer.lr", no leading +)
  std::string kind;                  // "interval", "range", "choice" or "glob"
  bool log = false;                  // tag(log, ...)
  std::optional<double> low, high;   // an interval's bounds
  std::vector<std::string> choices;  // a choice's values in order, as override text
};

struct Sweep {
  std::string dir;
  std::string name;
  std::string sweeper;                  // "basic", "optuna", ...
  std::vector<std::string> objectives;  // Optuna's
  std::vector<std::string> directions;  // minimize / maximize, one per objective
  std::vector<SweptParam> space;        // empty when multirun.yaml does not say
  std::vector<Trial> trials;
  std::vector<std::string> notes;
};

struct Collection {
  std::vector<Run> runs;
  std::vector<Sweep> sweeps;
  std::vector<std::string> notes;  // skipped folders and files, across everything
};

// Reads every run and sweep under `paths` (each a run directory, a sweep directory or a folder
// of them). NotFound when a path is missing or holds no run at all.
absl::StatusOr<Collection> ReadRuns(const std::vector<std::string>& paths);

// One run directory; `name` is how the report calls it.
Run ReadRun(const std::string& dir, const std::string& name);

}  // namespace kiln::report
