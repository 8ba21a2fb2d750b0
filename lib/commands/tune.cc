// `kiln tune lr_find`: the learning-rate finder on the job `train` would run (lr_finder.h).
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/commands/job.h"
#include "lib/config/json.h"
#include "lib/logging/logger.h"
#include "lib/report/lr_find_plot.h"
#include "lib/run/command.h"
#include "lib/run/environment.h"
#include "lib/tuner/lr_finder.h"

namespace kiln {
namespace {

// `tune lr_find`: the learning-rate finder on the job `train` would run (lr_finder.h), its curve
// in lr_find.csv and lr_find.png; with tuner.lr_find.apply (--apply) that job is then trained, in
// the same run directory, with the suggestion as optimizer.lr.
absl::Status TuneCommand(run::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(LrFindOptions o, LrFindOptions::FromConfig(ctx.cfg));
  KILN_ASSIGN_OR_RETURN(run::Environment env, run::ReadEnvironment());
  if (env.distributed()) {
    return absl::FailedPreconditionError(absl::StrCat("kiln tune runs in one process, not as rank ",
                                                      env.rank, " of ", env.world_size, " (",
                                                      env.source, ")"));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Job::FromConfig(ctx.cfg, ctx.output_dir));
  if (job->options().devices > 1 || job->options().num_nodes > 1) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find runs in one process: set trainer.devices=1 trainer.num_nodes=1 (then "
        "train "
        "data-parallel with the suggested optimizer.lr)");
  }
  if (!job->ckpt_path().empty()) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find starts from the model's initial weights, not from ckpt_path (to start "
        "from a "
        "checkpoint's weights: model.init_from=FILE)");
  }
  KILN_ASSIGN_OR_RETURN(LrFindResult result,
                        FindLearningRate(job->options(), job->fit_inputs(), o));
  KILN_RETURN_IF_ERROR(WriteLrFindCsv(ctx.output_dir, result));
  report::LrCurve curve{result.lrs, result.losses, result.smoothed, result.suggestion,
                        o.mode == "exponential"};
  std::string title = absl::StrCat("lr_find: ", ctx.cfg.Get<std::string>("name").value_or("kiln"));
  KILN_ASSIGN_OR_RETURN(report::PlotFiles plot,
                        report::WriteLrFindPlot(ctx.output_dir, curve, title));
  if (!plot.note.empty()) Logger::Instance().Warning(plot.note);
  if (!result.suggestion.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("kiln tune lr_find: no suggestion: the sweep ended after %d steps (%s), "
                        "too few for skip_begin + skip_end + 2 "
                        "= %d points; lower tuner.lr_find.max_lr (the curve is in %s/lr_find.csv)",
                        result.lrs.size(),
                        result.stopped_early.empty() ? "non-finite losses" : result.stopped_early,
                        o.skip_begin + o.skip_end + 2, ctx.output_dir));
  }
  const size_t at = *result.suggestion;
  const double lr = result.lrs[at];
  std::printf(
      "lr_find: suggested lr %s (steepest descent of the smoothed loss, step %zu of %zu); "
      "%s/lr_find.csv%s\n",
      config::PythonFloatRepr(lr).c_str(), at + 1, result.lrs.size(), ctx.output_dir.c_str(),
      plot.png.empty() ? "" : absl::StrCat(", ", plot.png).c_str());
  std::fflush(stdout);
  if (!o.apply) return absl::OkStatus();
  // The job trains with the suggestion as optimizer.lr: its optimizer is built again from the
  // config with that lr, and the config its checkpoints keep says so.
  config::NodePtr root = ctx.cfg.node()->Clone();
  config::NodePtr optimizer = root->Find("optimizer");
  if (optimizer == nullptr || !optimizer->is_map() || optimizer->Find("lr") == nullptr) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find --apply: the optimizer config has no 'lr' to set");
  }
  const std::string was = config::PythonStr(*optimizer->Find("lr"));
  optimizer->Set("lr", config::Node::Float(lr));
  ctx.cfg = config::Config(root);
  KILN_RETURN_IF_ERROR(job->RebuildOptimizer(ctx.cfg));
  Logger::Instance().Info(
      absl::StrCat("lr_find --apply: training with optimizer.lr=", config::PythonFloatRepr(lr),
                   " (the suggestion; the config said ", was, ")"));
  return job->FitThenTest().status();
}

const bool kTuneRegistered = [] {
  run::RegisterCommand("tune", TuneCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
