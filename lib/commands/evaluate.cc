// `kiln validate` and `kiln test`: the job's model from a checkpoint (ckpt_path: a file, last or
// best; none: model.pretrained's folder as it is), evaluated; the metrics on stdout and in
// val_metrics.yaml / test_metrics.yaml.
#include <cstdio>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/commands/job.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/trainer/process_settings.h"

namespace kiln {
namespace {

absl::Status EvaluateCommand(run::JobContext& ctx, data::Stage stage) {
  StopSignals stop_signals;  // SIGINT/SIGTERM: exit 130/143 between batches, no metrics written
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Job> job,
                        Job::FromConfig(ctx.cfg, ctx.output_dir, Job::Purpose::kEvaluate));
  // Without a checkpoint, a model built from a Hugging Face folder is evaluated as it is (its
  // weights came with it), as transformers' Trainer.evaluate() would.
  auto pretrained = ctx.cfg.Get<std::string>("model.pretrained");
  if (job->ckpt_path().empty() && pretrained.ok() && !pretrained->empty()) {
    Logger::Instance().Info(absl::StrCat("kiln ", ctx.command, ": model.pretrained=", *pretrained,
                                         " as it is (no ckpt_path)"));
  } else {
    KILN_RETURN_IF_ERROR(job->LoadCheckpoint(job->ckpt_path(), ctx.command).status());
  }
  std::map<std::string, double> metrics;
  if (stage == data::Stage::kTest) {
    KILN_ASSIGN_OR_RETURN(metrics, job->Test());
  } else {
    KILN_ASSIGN_OR_RETURN(metrics, job->Validate());
  }
  std::string text = MetricsYaml(metrics);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return absl::OkStatus();
}

const bool kEvaluateRegistered = [] {
  run::RegisterCommand("validate", [](run::JobContext& ctx) {
    return EvaluateCommand(ctx, data::Stage::kValidate);
  });
  run::RegisterCommand(
      "test", [](run::JobContext& ctx) { return EvaluateCommand(ctx, data::Stage::kTest); });
  return true;
}();

}  // namespace
}  // namespace kiln
