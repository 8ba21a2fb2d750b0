// `kiln mlflow-sync run_dir=RUN`: sends what a run trained while its MLflow server was away left in
// RUN/mlflow/pending.jsonl (its opening, metrics, artifacts, end status) to the server its
// RUN/mlflow/run.json names, or to tracking_uri=URI.
#include "components/loggers/mlflow_tracker.h"
#include "lib/commands/command_options.h"
#include "lib/run/command.h"

namespace kiln {
namespace {

struct MlflowSyncOptions {
  std::optional<std::string> run_dir;
  std::optional<std::string> tracking_uri;
  double timeout = 10;
};

absl::Status MlflowSyncCommand(run::JobContext& ctx) {
  static const auto* binding = new OptionBinding<MlflowSyncOptions>(
      OptionBinding<MlflowSyncOptions>()
          .Field("run_dir", &MlflowSyncOptions::run_dir, "the run folder to send")
          .Field("tracking_uri", &MlflowSyncOptions::tracking_uri,
                 "the server (null: the one the run logged to)")
          .Field("timeout", &MlflowSyncOptions::timeout, "seconds for one request",
                 GreaterThan(0.0)));
  KILN_ASSIGN_OR_RETURN(MlflowSyncOptions o, CommandOptions(ctx.cfg, *binding, "mlflow-sync"));
  if (!o.run_dir.has_value() || o.run_dir->empty())
    return absl::InvalidArgumentError("kiln mlflow-sync needs run_dir=RUN (a run folder)");
  return mlflow::SyncRunFolder(*o.run_dir, o.tracking_uri.value_or(""), o.timeout);
}

const bool kMlflowSyncRegistered = [] {
  run::RegisterCommand("mlflow-sync", MlflowSyncCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
