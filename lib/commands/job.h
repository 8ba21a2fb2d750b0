// kiln::Job: "config in, trained model out" as one library call. A Job is what `kiln train` builds
// from a composed config (the seed first, then the trainer options, the task and its model with
// model.init_*/freeze applied, the data module, the optimizer and scheduler, the callbacks and the
// loggers), every component built before anything runs, so a mistake anywhere is one error before
// any training. The command line, `kiln tune`, the evaluation commands and the Python package all
// go through it.
//
//   auto job = kiln::Job::Compose({.overrides = {"experiment=fashion_mnist",
//   "trainer.max_epochs=1"}}); KILN_RETURN_IF_ERROR((*job)->Fit()); KILN_ASSIGN_OR_RETURN(auto
//   metrics, (*job)->Test());   // test_metrics.yaml in the run folder
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/base/directory_lock.h"
#include "lib/base/status_macros.h"
#include "lib/config/compose.h"
#include "lib/config/config.h"
#include "lib/data/datamodule.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"

namespace kiln {

namespace distributed {
class ProcessGroup;
}

// What Job::Compose takes: `kiln train`'s command line as a call.
struct JobRequest {
  std::vector<std::string> overrides;  // Hydra's grammar: "model=mlp", "trainer.max_epochs=1", ...
  std::string config_dir;  // "": kiln's own configs (the installed ones, or the source tree's)
  std::string config_name = "train";
};

// A config composed as `kiln train OVERRIDES` composes it, its interpolations resolved, with the
// run folder hydra.run.dir names (not yet created) as paths.output_dir.
struct ComposedJob {
  config::Config cfg;
  std::string output_dir;
  std::shared_ptr<config::ComposeResult> composed;  // for writing the run folder's .hydra files
  std::string log_file;  // the run's log file (hydra.job_logging), "" when off
};
// `from_run`: a job that evaluates a trained run; `run_dir=RUN` (or a checkpoint file inside a
// run) makes RUN's stored config the job's, the overrides on top, as `kiln test run_dir=RUN` does.
absl::StatusOr<ComposedJob> ComposeJob(const JobRequest& request, bool from_run = false);
// Creates the run folder with its .hydra files (config.yaml, hydra.yaml, overrides.yaml).
absl::Status WriteRunFolder(const ComposedJob& job);

class Job {
 public:
  // kFit builds the optimizer and scheduler; kEvaluate (validate, test, predict, export) does not,
  // and starts from a checkpoint's weights (LoadCheckpoint).
  enum class Purpose { kFit, kEvaluate };

  // Builds the job of a resolved config; its results (test_metrics.yaml, ...) go to `output_dir`.
  static absl::StatusOr<std::unique_ptr<Job>> FromConfig(const config::Config& cfg,
                                                         const std::string& output_dir,
                                                         Purpose purpose = Purpose::kFit);
  // The same, for a config that did not come from Job::Compose (kiln.Trainer(cfg) in Python):
  // records it in `output_dir`/.hydra/config.yaml (what kiln report, kiln predict and read_run
  // read) and, to train, holds that folder's lock while the job lives, as Compose and `kiln train`
  // do; the lock is taken first, so a refused job overwrites nothing.
  static absl::StatusOr<std::unique_ptr<Job>> FromConfigInRunFolder(
      const config::Config& cfg, const std::string& output_dir, Purpose purpose = Purpose::kFit);
  // Composes the config as `kiln train OVERRIDES` does (Hydra 1.3's composition, a run folder from
  // hydra.run.dir with its .hydra/ files), then builds the job.
  static absl::StatusOr<std::unique_ptr<Job>> Compose(const JobRequest& request,
                                                      Purpose purpose = Purpose::kFit);
  // Tells the loggers how the job ended (MetricsLogger::OnJobEnd): the first failure of Fit, Test,
  // Validate or FitThenTest, a stop signal, an exception on its way, or OK.
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Trains (Trainer::Fit): epochs, validation, checkpoints, resume from ckpt_path.
  absl::Status Fit();
  // Evaluates on the test split, adds the task's report (confusion matrix, per-class accuracy) and
  // writes test_metrics.yaml; returns the metrics.
  absl::StatusOr<std::map<std::string, double>> Test();
  // Evaluates on the validation split and writes val_metrics.yaml.
  absl::StatusOr<std::map<std::string, double>> Validate();
  // `kiln train`: Fit, then (rank 0, unless the config says test: false) Test on the best
  // checkpoint when one was kept, as lightning-hydra-template does. Returns the test metrics ({}
  // untested).
  absl::StatusOr<std::map<std::string, double>> FitThenTest();
  // Loads a checkpoint's weights into the model: a file, or `last` / `best` (what the
  // model_checkpoint callback recorded). `command` names the caller in errors. Returns the file.
  absl::StatusOr<std::string> LoadCheckpoint(const std::string& which,
                                             const std::string& command = "Job");

  // Adds a callback after those the config names (before Fit, Test or Validate first runs).
  absl::Status AddCallback(std::shared_ptr<Callback> callback);
  // Adds a logger after those the config names (on rank 0; before Fit, Test or Validate first
  // runs).
  absl::Status AddLogger(std::shared_ptr<MetricsLogger> logger);

  // Joins a data-parallel group (every rank trains; only rank 0 logs and tests).
  void set_process_group(std::shared_ptr<distributed::ProcessGroup> group);
  // Takes `cfg` as the job's config and builds its optimizer again from cfg.optimizer (kiln tune
  // lr_find --apply trains with the suggested learning rate).
  absl::Status RebuildOptimizer(const config::Config& cfg);

  Task& task() { return *task_; }
  data::DataModule& data() { return *data_; }
  Trainer& trainer();
  const TrainerOptions& options() const { return options_; }
  const config::Config& config() const { return cfg_; }
  const std::string& output_dir() const { return output_dir_; }
  const std::string& model_name() const { return model_name_; }
  // ckpt_path as the config gives it ("" when null): a file, `last` or `best`.
  const std::string& ckpt_path() const { return ckpt_path_; }
  // What Trainer::Fit takes, for callers that drive the trainer themselves (the lr finder).
  FitInputs fit_inputs() const;

 private:
  Job() = default;
  // Keeps the first failure as the job's outcome.
  void Record(const absl::Status& status);
  absl::StatusOr<std::map<std::string, double>> TestOnce();
  absl::StatusOr<std::map<std::string, double>> FitThenTestOnce();
  // While a job that Compose made fits, tests or validates, kiln's log lines also go to its run's
  // log file, as `kiln train` writes them (the command line opens the file itself). Nested calls
  // (FitThenTest) keep it open until the outermost one ends.
  class LogFileScope {
   public:
    explicit LogFileScope(Job& job);
    ~LogFileScope();
    const absl::Status& status() const { return status_; }

   private:
    Job& job_;
    bool entered_ = false;
    absl::Status status_;
  };

  config::Config cfg_;
  std::string output_dir_;
  std::shared_ptr<Task> task_;
  std::shared_ptr<data::DataModule> data_;
  std::shared_ptr<OptimizerFactory> optimizer_;
  std::shared_ptr<Scheduler> scheduler_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<MetricsLogger>> loggers_;
  TrainerOptions options_;
  uint64_t seed_ = 0;
  std::string model_name_;
  std::string ckpt_path_;
  const CheckpointKeeper* checkpoint_keeper_ = nullptr;  // one of callbacks_, or null
  std::string evaluated_run_;   // an evaluating job's run_dir: "best" and "last" are that run's
  std::string checkpoint_dir_;  // the keeper's folder, or default_root_dir/checkpoints
  std::shared_ptr<distributed::ProcessGroup> group_;
  std::unique_ptr<Trainer> trainer_;
  std::string log_file_;
  int log_file_users_ = 0;
  DirectoryLock run_lock_;  // held by a job that Compose made to train
  absl::Status outcome_;    // the first failure, for the loggers at the end
};

// The checkpoint a command starts from: `ckpt_path` as a file, `last` or `best` (what `keeper`
// recorded in `checkpoint_dir`). For commands that load it without building a job (predict).
absl::StatusOr<std::string> EvaluationCheckpoint(const std::string& command,
                                                 const std::string& ckpt_path,
                                                 const CheckpointKeeper* keeper,
                                                 const std::string& checkpoint_dir);
// Where a job's checkpoints are: the keeper's folder, or default_root_dir/checkpoints (the
// keeper's too when the config names none).
std::string CheckpointDir(CheckpointKeeper* keeper, const TrainerOptions& options);

// Metrics as YAML (test_metrics.yaml, what `kiln test` prints).
std::string MetricsYaml(const std::map<std::string, double>& metrics);

// True when `key` is missing or null.
bool IsNull(const config::Config& cfg, const std::string& key);

// Every non-null entry of a mapping like `callbacks:`, instantiated in order.
template <typename T>
absl::StatusOr<std::vector<std::shared_ptr<T>>> InstantiateAll(const config::Config& cfg,
                                                               const std::string& key) {
  std::vector<std::shared_ptr<T>> out;
  if (IsNull(cfg, key)) return out;
  KILN_ASSIGN_OR_RETURN(config::Config group, cfg.Sub(key));
  if (!group.node()->is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be a mapping of name: {_target_: ...}"));
  }
  for (const auto& name : group.Keys()) {
    if (IsNull(group, name)) continue;
    KILN_ASSIGN_OR_RETURN(config::Config item, group.Sub(name));
    KILN_ASSIGN_OR_RETURN(auto component, Registry<T>::Get().Instantiate(item));
    out.push_back(std::move(component));
  }
  return out;
}

}  // namespace kiln
