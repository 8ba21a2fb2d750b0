#include "lib/trainer/internal/fit_loop.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/exit_code.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/internal/evaluation_loop.h"
#include "lib/trainer/internal/training_epoch_loop.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/trainer.h"

namespace kiln {

FitLoop::FitLoop(LoopContext ctx) : ctx_(ctx) {}
FitLoop::~FitLoop() = default;

absl::Status FitLoop::Run(const FitInputs& inputs) {
  KILN_ASSIGN_OR_RETURN(Plan plan, Setup(inputs));
  KILN_RETURN_IF_ERROR(ConfigureOptimizers(inputs, plan));
  // From here a signal ends the fit at a step boundary, with a checkpoint.
  StopSignals signals;
  KILN_ASSIGN_OR_RETURN(bool resumed, Start(inputs));
  if (validation_ && ctx_.options.num_sanity_val_steps > 0 && !resumed &&
      ctx_.options.fast_dev_run == 0) {
    // A few validation batches first, so a broken validation step fails before hours of training.
    KILN_RETURN_IF_ERROR(validation_->RunBatches(ctx_.options.num_sanity_val_steps).status());
  }
  KILN_RETURN_IF_ERROR(Announce(plan));
  return Finish(RunEpochs(plan.max_epochs));
}

absl::StatusOr<FitLoop::Plan> FitLoop::Setup(const FitInputs& inputs) {
  const TrainerOptions& options = ctx_.options;
  Strategy& strategy = ctx_.strategy;
  ctx_.state.inputs = inputs;
  ctx_.state.progress.start = std::chrono::steady_clock::now();
  // A stop asked for in an earlier fit of this trainer (early stopping) does not end this one.
  ctx_.state.stop = StopState{};

  Plan plan;
  plan.threads = strategy.ConfigureProcess();
  at::globalContext().setDeterministicAlgorithms(options.deterministic, /*warn_only=*/false);
  torch::manual_seed(inputs.seed);
  KILN_RETURN_IF_ERROR(strategy.SelectDevice());

  KILN_ASSIGN_OR_RETURN(plan.train_samples, SetupData(inputs));
  int64_t& train_batches = ctx_.state.progress.train_batches;
  train_batches = options.limit_train_batches.Of(train_loader_->num_batches());
  if (options.fast_dev_run > 0) train_batches = std::min(train_batches, options.fast_dev_run);
  if (train_batches <= 0)
    return absl::FailedPreconditionError("no training batches (check limit_train_batches)");
  plan.max_epochs = options.fast_dev_run > 0 ? 1 : options.max_epochs;
  plan.steps_per_epoch =
      (train_batches + options.accumulate_grad_batches - 1) / options.accumulate_grad_batches;
  plan.total_steps =
      options.max_steps > 0 ? options.max_steps : plan.steps_per_epoch * plan.max_epochs;
  return plan;
}

absl::Status FitLoop::ConfigureOptimizers(const FitInputs& inputs, const Plan& plan) {
  Trainer& t = ctx_.trainer;
  Task& task = *inputs.task;
  KILN_RETURN_IF_ERROR(ctx_.strategy.PlaceModule(task.module()));
  KILN_RETURN_IF_ERROR(ctx_.callbacks.ForEach([&](Callback& c) { return c.OnSetup(t); }));
  // Frozen parameters (model.freeze, backbone_finetuning) stay out of the optimizer.
  NamedParameters params;
  std::vector<std::string> model_names;
  for (const auto& p : task.module().named_parameters()) {
    if (p.value().requires_grad()) params.emplace_back(p.key(), p.value());
    model_names.push_back(p.key());
  }
  KILN_ASSIGN_OR_RETURN(ctx_.state.optimizer, inputs.optimizer->Create(params, model_names));
  if (inputs.scheduler) {
    KILN_RETURN_IF_ERROR(inputs.scheduler->Attach(ctx_.state.optimizer.get(), plan.total_steps,
                                                  plan.steps_per_epoch));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> FitLoop::Start(const FitInputs& inputs) {
  Trainer& t = ctx_.trainer;
  KILN_RETURN_IF_ERROR(ctx_.callbacks.ForEach([&](Callback& c) { return c.OnFitStart(t); }));
  if (t.is_global_zero()) {
    // A run killed while writing a checkpoint leaves its temporary file (never a half checkpoint
    // under the final name); the next run removes it.
    if (int removed = RemoveStaleTemporaryFiles(ctx_.state.checkpoint_dir); removed > 0) {
      Logger::Instance().Info(absl::StrCat(
          "removed ", removed, " temporary file(s) that an interrupted checkpoint write left in ",
          ctx_.state.checkpoint_dir));
    }
  }
  KILN_ASSIGN_OR_RETURN(bool resumed, Restore(inputs));
  if (resumed && t.is_global_zero()) {
    ctx_.logging.ForEach(
        [&](MetricsLogger& logger) { return logger.OnResume(ctx_.state.progress.global_step); });
  }
  KILN_RETURN_IF_ERROR(ctx_.strategy.SetupDataParallel(inputs.task->module()));
  // fsdp: a resumed optimizer's state came whole, as the model's weights did; now they are pieces.
  if (ctx_.state.optimizer)
    KILN_RETURN_IF_ERROR(ctx_.strategy.ShardOptimizerState(*ctx_.state.optimizer));
  return resumed;
}

absl::Status FitLoop::Announce(const Plan& plan) {
  Trainer& t = ctx_.trainer;
  const TrainerOptions& options = ctx_.options;
  Strategy& strategy = ctx_.strategy;
  const bool cuda = strategy.device().is_cuda();
  Logger::Instance().Info(absl::StrCat(
      "training on ", cuda ? "cuda" : "cpu", " with ", plan.threads, " threads",
      strategy.distributed() ? absl::StrCat(" per rank, ", t.world_size(), " ranks") : "",
      cuda ? CudaDeviceNote(strategy.device()) : BlasKernelsNote(), ": ", plan.train_samples,
      " samples, ", ctx_.state.progress.train_batches, " batches per epoch",
      strategy.distributed() ? " per rank" : "", ", up to ", plan.max_epochs, " epochs"));
  if (options.profiler == TrainerOptions::ProfilerKind::kAdvanced && t.is_global_zero()) {
    KILN_RETURN_IF_ERROR(MakeDirs(options.default_root_dir));
    ctx_.state.operator_trace = std::make_unique<OperatorTrace>(
        options.default_root_dir + "/profile.trace.json",
        options.profiler_wait + options.profiler_warmup, options.profiler_active);
  }
  return absl::OkStatus();
}

absl::Status FitLoop::RunEpochs(int64_t max_epochs) {
  const TrainerOptions& options = ctx_.options;
  ctx_.state.train_loader = train_loader_.get();
  TrainingEpochLoop epoch_loop(ctx_, *train_loader_, validation_.get());
  while (ctx_.state.progress.epoch < max_epochs && !ctx_.state.stop.requested) {
    if (options.max_steps > 0 && ctx_.state.progress.global_step >= options.max_steps) break;
    KILN_ASSIGN_OR_RETURN(bool out_of_time, ctx_.strategy.AnyRank(ctx_.OutOfTime()));
    if (out_of_time) {
      Logger::Instance().Info("max_time reached");
      break;
    }
    auto stopped_inside = epoch_loop.Run();
    ReturnFreedMemory();
    KILN_RETURN_IF_ERROR(stopped_inside.status());
    if (*stopped_inside) break;
  }
  return absl::OkStatus();
}

absl::Status FitLoop::Finish(absl::Status status) {
  Trainer& t = ctx_.trainer;
  // Alone, a signal that came after the last step still stops with a checkpoint; with several
  // ranks only the signal they agreed on at a step boundary counts, so all of them end alike.
  ReportProfiles();
  int signal = ctx_.strategy.distributed() ? ctx_.state.stop.signal : StopSignals::Received();
  if (status.ok() && signal != 0) status = Interrupted(signal);
  if (!status.ok()) {
    ctx_.callbacks.OnException(t, status);
    return status;
  }
  KILN_RETURN_IF_ERROR(ctx_.callbacks.ForEach([&](Callback& c) { return c.OnFitEnd(t); }));
  KILN_RETURN_IF_ERROR(ctx_.strategy.Barrier());
  ctx_.logging.ForEach([](MetricsLogger& logger) { return logger.Finish(); });
  const FitProgress& p = ctx_.state.progress;
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  Logger::Instance().Info(absl::StrFormat(
      "fit done: %d epochs, %d optimizer steps, %d samples in %.1f s%s; peak resident memory %d MB",
      p.epoch, p.global_step, p.samples, t.elapsed_seconds(),
      ctx_.state.stop.reason.empty() ? "" : " (" + ctx_.state.stop.reason + ")",
      static_cast<int64_t>(usage.ru_maxrss / 1024)));
  // What this rank keeps of the model (with fsdp, its pieces): every rank says it in its log.
  if (ctx_.state.optimizer) {
    ModelStateBytes bytes =
        ctx_.strategy.ModelState(ctx_.state.inputs.task->module(), *ctx_.state.optimizer);
    auto mb = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
    Logger::Instance().Info(absl::StrFormat(
        "model state on this rank: parameters %.2f MB, gradients %.2f MB, optimizer state %.2f MB",
        mb(bytes.parameters), mb(bytes.parameters_trained), mb(bytes.optimizer)));
  }
  return ctx_.strategy.EndSharding();
}

void FitLoop::ReportProfiles() {
  Trainer& t = ctx_.trainer;
  if (ctx_.profiler.enabled() && t.is_global_zero()) {
    Logger::Instance().Info(
        "simple profiler: wall time per phase of fit (each phase its own time only)");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx_.state.progress.start)
            .count();
    for (const std::string& line : ctx_.profiler.Report(seconds)) Logger::Instance().Info(line);
  }
  if (ctx_.state.operator_trace) {
    if (ctx_.state.operator_trace->Finish()) {
      Logger::Instance().Info(
          absl::StrCat("advanced profiler: LibTorch's operator profile of training batches ",
                       ctx_.state.operator_trace->first() + 1, "-",
                       ctx_.state.operator_trace->first() + ctx_.state.operator_trace->count(),
                       " of the run in ", ctx_.state.operator_trace->path(),
                       " (open in chrome://tracing or ui.perfetto.dev)"));
    } else {
      Logger::Instance().Warning(absl::StrCat("advanced profiler: the run trained fewer than ",
                                              ctx_.state.operator_trace->first() + 1,
                                              " batches; no operator trace written"));
    }
    ctx_.state.operator_trace.reset();
  }
}

absl::StatusOr<int64_t> FitLoop::SetupData(const FitInputs& inputs) {
  Trainer& t = ctx_.trainer;
  const TrainerOptions& options = ctx_.options;
  data::DataModule& dm = *inputs.data;
  KILN_ASSIGN_OR_RETURN(
      std::shared_ptr<const data::Dataset> train_ds,
      SetUpSplit(
          dm, data::Stage::kFit, ctx_.strategy.device(),
          [](data::DataModule& d) { return d.train_dataset(); }, "training split"));
  data::LoaderOptions lo = dm.loader_options();
  lo.seed = inputs.seed;
  ctx_.state.progress.batch_size = lo.batch_size;
  std::shared_ptr<const data::Dataset> val_ds = dm.val_dataset();
  bool shuffle = true;
  if (options.overfit_batches > 0) {
    // The same few batches, in order, for training and validation.
    std::vector<int64_t> first(
        static_cast<size_t>(std::min(train_ds->size(), options.overfit_batches * lo.batch_size)));
    std::iota(first.begin(), first.end(), 0);
    train_ds = data::Subset(train_ds, first);
    val_ds = train_ds;
    shuffle = false;
  }
  // Each rank reads its part of the epoch's order (PyTorch's DistributedSampler; shards split by
  // position in the epoch's stream).
  int64_t rank = ctx_.strategy.distributed() ? t.global_rank() : 0;
  int64_t world = ctx_.strategy.distributed() ? t.world_size() : 1;
  std::shared_ptr<data::Sampler> train_sampler =
      data::SamplerFor(*train_ds, shuffle, inputs.seed, rank, world);
  std::shared_ptr<data::Sampler> val_sampler =
      val_ds ? data::SamplerFor(*val_ds, false, inputs.seed, rank, world) : nullptr;
  train_loader_ = std::make_unique<data::DataLoader>(train_ds, train_sampler, lo);
  if (val_ds) {
    val_loader_ = std::make_unique<data::DataLoader>(val_ds, val_sampler, lo);
    validation_ = std::make_unique<EvaluationLoop>(ctx_, *val_loader_, "val");
  }
  return train_ds->size();
}

absl::StatusOr<bool> FitLoop::Restore(const FitInputs& inputs) {
  if (inputs.ckpt_path.empty()) return false;
  std::string path = inputs.ckpt_path;
  if (path == "last") path = ctx_.state.checkpoint_dir + "/last.ckpt";
  if (path == "best") {
    return absl::InvalidArgumentError(
        "ckpt_path=best only applies to validate/test/predict; fit resumes from last or a path");
  }
  struct stat st;
  if (inputs.ckpt_path == "last" && ::stat(path.c_str(), &st) != 0) {
    Logger::Instance().Info(
        absl::StrCat("ckpt_path=last: no checkpoint at ", path, " yet; starting fresh"));
    return false;
  }
  KILN_RETURN_IF_ERROR(ResumeFrom(path));
  return true;
}

absl::Status FitLoop::Interrupted(int signal) {
  Trainer& t = ctx_.trainer;
  std::string path = ctx_.state.checkpoint_dir + "/last.ckpt";
  absl::Status saved = absl::OkStatus();
  if (t.checkpointing_enabled()) {
    saved = MakeDirs(ctx_.state.checkpoint_dir);
    if (saved.ok()) saved = t.SaveCheckpoint(path);
  }
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
  return WithExitCode(
      absl::AbortedError(absl::StrCat(
          "interrupted by ", name, " at epoch ", ctx_.state.progress.epoch, ", step ",
          ctx_.state.progress.global_step,
          saved.ok() ? absl::StrCat("; resume with ckpt_path=", path)
                     : absl::StrCat("; could not save a checkpoint: ", saved.message()))),
      128 + signal);
}

absl::Status FitLoop::ResumeFrom(const std::string& path) {
  Trainer& t = ctx_.trainer;
  FitProgress& p = ctx_.state.progress;
  KILN_ASSIGN_OR_RETURN(LoopPosition loop, RestoreFitCheckpoint(
                                               path, ctx_.Parts(),
                                               [this](torch::nn::Module& module) {
                                                 // The fit loop has placed this module already: the
                                                 // same module cannot be refused now.
                                                 ctx_.strategy.PlaceModule(module).IgnoreError();
                                               },
                                               [this, &t] {
                                                 return ctx_.callbacks.ForEach([&t](Callback& c) {
                                                   return c.OnLoadCheckpoint(t);
                                                 });
                                               },
                                               p.batch_size));
  p.Restore(loop);
  KILN_RETURN_IF_ERROR(AdaptPosition(loop.world_size, loop.batch_size, path));
  Logger::Instance().Info(absl::StrCat("resumed from ", path, " at epoch ", p.epoch, ", batch ",
                                       p.batch_in_epoch, ", step ", p.global_step));
  return absl::OkStatus();
}

absl::Status FitLoop::AdaptPosition(int64_t saved_world_size, int64_t saved_batch_size,
                                    const std::string& path) {
  FitProgress& p = ctx_.state.progress;
  const int64_t world = ctx_.trainer.world_size();
  int64_t per_step = world * p.batch_size;
  if (saved_world_size * saved_batch_size == per_step || p.batch_in_epoch == 0)
    return absl::OkStatus();
  // Batch b of every rank covers positions [b*W*B, (b+1)*W*B) of the epoch's order whatever the
  // world size W and batch size B, so a position carries over when the new W*B divides it.
  int64_t samples = p.batch_in_epoch * saved_world_size * saved_batch_size;
  if (samples % per_step != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " stopped mid-epoch after ", samples, " samples (", saved_world_size,
        " ranks x batch ", saved_batch_size, "); ", world, " ranks x batch ", p.batch_size,
        " cannot continue from there: choose sizes whose product divides ", samples,
        ", or resume from an end-of-epoch checkpoint"));
  }
  p.batch_in_epoch = samples / per_step;
  return absl::OkStatus();
}

}  // namespace kiln
