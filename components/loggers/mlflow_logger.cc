// mlflow: the run in an MLflow tracking server (logger.mlflow.tracking_uri=http://HOST:PORT): the
// composed config as params, kiln's version, the git commit, the command line and the host as
// tags, metrics in batches with their steps and timestamps, .hydra/ and test_metrics.yaml (and with
// log_model the best checkpoint) as artifacts, and FINISHED, FAILED or KILLED as the job ends. A
// thread of its own sends them (mlflow_tracker.h): a server that is away never slows training, and
// what it missed is sent when it answers, at the end, or by `kiln mlflow-sync run_dir=RUN`.
#include "components/loggers/mlflow_tracker.h"
#include "lib/base/exit_code.h"
#include "lib/registry/registry.h"
#include "lib/sweep/trial_channel.h"
#include "lib/trainer/callback.h"

namespace kiln {
namespace {

class MlflowLogger : public MetricsLogger {
 public:
  explicit MlflowLogger(std::unique_ptr<mlflow::Tracker> tracker) : tracker_(std::move(tracker)) {}

  absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) override {
    tracker_->LogMetrics(metrics, step);
    return absl::OkStatus();
  }

  absl::Status OnResume(int64_t /*step*/) override {
    tracker_->Resume();
    return absl::OkStatus();
  }

  void OnJobEnd(const absl::Status& outcome) override {
    int code = RequestedExitCode(outcome);
    std::map<std::string, std::string> tags;
    if (code == sweep::kExitTrialPruned) tags["kiln.trial_state"] = "PRUNED";
    tracker_->End(mlflow::RunStatusFor(code, outcome.ok()), tags);
  }

 private:
  std::unique_ptr<mlflow::Tracker> tracker_;
};

struct MlflowLoggerOptions {
  std::string tracking_uri;
  std::string experiment_name = "kiln";
  std::optional<std::string> run_name;
  std::string save_dir = ".";
  int64_t max_queue = 10000;
  double timeout = 10;
  double flush_timeout = 30;
  double batch_interval = 5;
  bool log_model = false;
};

KILN_REGISTER_BOUND(
    MetricsLogger, "mlflow",
    "an MLflow tracking server's run: params, tags, metrics, artifacts, status",
    OptionBinding<MlflowLoggerOptions>()
        .Field("tracking_uri", &MlflowLoggerOptions::tracking_uri,
               "the server: http://HOST:PORT (credentials from MLFLOW_TRACKING_TOKEN or "
               "MLFLOW_TRACKING_USERNAME/PASSWORD)",
               NonEmpty())
        .Field("experiment_name", &MlflowLoggerOptions::experiment_name,
               "the experiment, created when missing", NonEmpty())
        .Field("run_name", &MlflowLoggerOptions::run_name, "the run's name (null: the run folder)")
        .Field("save_dir", &MlflowLoggerOptions::save_dir,
               "the run folder: its .hydra/config.yaml are the params; mlflow/ in it keeps the "
               "run's id and what is not sent yet")
        .Field("max_queue", &MlflowLoggerOptions::max_queue,
               "records held in memory before they go to mlflow/pending.jsonl", AtLeast(1))
        .Field("timeout", &MlflowLoggerOptions::timeout, "seconds for one request",
               GreaterThan(0.0))
        .Field("flush_timeout", &MlflowLoggerOptions::flush_timeout,
               "seconds the job's end waits for unsent records", AtLeast(0.0))
        .Field("batch_interval", &MlflowLoggerOptions::batch_interval,
               "seconds between two metrics requests, at least (sooner when 1000 values wait)",
               AtLeast(0.0))
        .Field("log_model", &MlflowLoggerOptions::log_model,
               "at the end, the best checkpoint (else last.ckpt) as an artifact under its path in "
               "the run folder"),
    [](const MlflowLoggerOptions& o) -> absl::StatusOr<std::shared_ptr<MetricsLogger>> {
      mlflow::TrackerOptions options;
      options.tracking_uri = o.tracking_uri;
      options.experiment_name = o.experiment_name;
      options.run_name = o.run_name.value_or("");
      options.run_dir = o.save_dir;
      options.max_queue = o.max_queue;
      options.timeout = o.timeout;
      options.flush_timeout = o.flush_timeout;
      options.batch_interval = o.batch_interval;
      options.log_model = o.log_model;
      KILN_ASSIGN_OR_RETURN(auto tracker, mlflow::Tracker::Start(options));
      return std::make_shared<MlflowLogger>(std::move(tracker));
    });

}  // namespace
}  // namespace kiln
