#include "lib/trainer/fit_loop.h"

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/core/exit_code.h"
#include "lib/core/files.h"
#include "lib/core/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/evaluation_loop.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/trainer.h"
#include "lib/trainer/training_epoch_loop.h"

namespace kiln {

FitLoop::FitLoop(Trainer& trainer) : trainer_(trainer) {}
FitLoop::~FitLoop() = default;

absl::Status FitLoop::Run(const FitInputs& inputs) {
  Trainer& t = trainer_;
  const TrainerOptions& options = t.options_;
  Strategy& strategy = t.strategy_;
  t.inputs_ = inputs;
  Task& task = *inputs.task;
  t.start_ = std::chrono::steady_clock::now();
  // A stop asked for in an earlier fit of this trainer (early stopping) does not end this one.
  t.stop_requested_ = t.stop_now_ = false;
  t.stop_reason_.clear();

  int threads = strategy.ConfigureProcess();
  at::globalContext().setDeterministicAlgorithms(options.deterministic, /*warn_only=*/false);
  torch::manual_seed(inputs.seed);
  KILN_RETURN_IF_ERROR(strategy.SelectDevice());

  KILN_ASSIGN_OR_RETURN(int64_t train_samples, SetupData(inputs));
  t.train_batches_ = options.limit_train_batches.Of(train_loader_->num_batches());
  if (options.fast_dev_run > 0) t.train_batches_ = std::min(t.train_batches_, options.fast_dev_run);
  if (t.train_batches_ <= 0) return absl::FailedPreconditionError("no training batches (check limit_train_batches)");
  int64_t max_epochs = options.fast_dev_run > 0 ? 1 : options.max_epochs;
  int64_t steps_per_epoch = (t.train_batches_ + options.accumulate_grad_batches - 1) / options.accumulate_grad_batches;
  int64_t total_steps = options.max_steps > 0 ? options.max_steps : steps_per_epoch * max_epochs;

  KILN_RETURN_IF_ERROR(strategy.PlaceModule(task.module()));
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnSetup(t); }));
  // Frozen parameters (model.freeze, backbone_finetuning) stay out of the optimizer.
  NamedParameters params;
  std::vector<std::string> model_names;
  for (const auto& p : task.module().named_parameters()) {
    if (p.value().requires_grad()) params.emplace_back(p.key(), p.value());
    model_names.push_back(p.key());
  }
  KILN_ASSIGN_OR_RETURN(t.optimizer_, inputs.optimizer->Create(params, model_names));
  if (inputs.scheduler) KILN_RETURN_IF_ERROR(inputs.scheduler->Attach(t.optimizer_.get(), total_steps, steps_per_epoch));

  StopSignals signals;
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnFitStart(t); }));
  if (t.is_global_zero()) {
    // A run killed while writing a checkpoint leaves its temporary file (never a half checkpoint
    // under the final name); the next run removes it.
    if (int removed = RemoveStaleTemporaryFiles(t.checkpoint_dir_); removed > 0) {
      Logger::Instance().Info(absl::StrCat("removed ", removed, " temporary file(s) that an interrupted checkpoint write left in ",
                                           t.checkpoint_dir_));
    }
  }
  KILN_ASSIGN_OR_RETURN(bool resumed, Restore(inputs));
  if (resumed && t.is_global_zero()) {
    t.ForEachLogger([&](MetricsLogger& logger) { return logger.OnResume(t.global_step_); });
  }
  KILN_RETURN_IF_ERROR(strategy.SetupDataParallel(task.module()));

  if (validation_ && options.num_sanity_val_steps > 0 && !resumed && options.fast_dev_run == 0) {
    // A few validation batches first, so a broken validation step fails before hours of training.
    KILN_RETURN_IF_ERROR(validation_->RunBatches(options.num_sanity_val_steps).status());
  }

  const bool cuda = strategy.device().is_cuda();
  Logger::Instance().Info(absl::StrCat("training on ", cuda ? "cuda" : "cpu", " with ", threads, " threads",
                                       strategy.distributed() ? absl::StrCat(" per rank, ", t.world_size(), " ranks") : "",
                                       cuda ? CudaDeviceNote(strategy.device()) : BlasKernelsNote(), ": ", train_samples, " samples, ",
                                       t.train_batches_, " batches per epoch", strategy.distributed() ? " per rank" : "",
                                       ", up to ", max_epochs, " epochs"));
  if (options.profiler == TrainerOptions::ProfilerKind::kAdvanced && t.is_global_zero()) {
    KILN_RETURN_IF_ERROR(MakeDirs(options.default_root_dir));
    t.operator_trace_ = std::make_unique<OperatorTrace>(
        options.default_root_dir + "/profile.trace.json",
        options.profiler_wait + options.profiler_warmup, options.profiler_active);
  }
  t.train_loader_ = train_loader_.get();
  TrainingEpochLoop epoch_loop(t, *train_loader_, validation_.get());
  absl::Status status;
  while (t.epoch_ < max_epochs && !t.stop_requested_) {
    if (options.max_steps > 0 && t.global_step_ >= options.max_steps) break;
    auto out_of_time = strategy.AnyRank(t.OutOfTime());
    if (!out_of_time.ok()) {
      status = out_of_time.status();
      break;
    }
    if (*out_of_time) {
      Logger::Instance().Info("max_time reached");
      break;
    }
    auto stopped_inside = epoch_loop.Run();
    ReturnFreedMemory();
    if (!stopped_inside.ok()) status = stopped_inside.status();
    if (!stopped_inside.ok() || *stopped_inside) break;
  }
  // Alone, a signal that came after the last step still stops with a checkpoint; with several
  // ranks only the signal they agreed on at a step boundary counts, so all of them end alike.
  ReportProfiles();
  int signal = strategy.distributed() ? t.stop_signal_ : StopSignals::Received();
  if (status.ok() && signal != 0) status = Interrupted(signal);
  if (!status.ok()) {
    for (auto& c : t.callbacks_) c->OnException(t, status);
    return status;
  }
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnFitEnd(t); }));
  KILN_RETURN_IF_ERROR(strategy.Barrier());
  t.ForEachLogger([](MetricsLogger& logger) { return logger.Finish(); });
  Logger::Instance().Info(absl::StrFormat("fit done: %d epochs, %d optimizer steps, %d samples in %.1f s%s", t.epoch_,
                                          t.global_step_, t.samples_, t.elapsed_seconds(),
                                          t.stop_reason_.empty() ? "" : " (" + t.stop_reason_ + ")"));
  return absl::OkStatus();
}

void FitLoop::ReportProfiles() {
  Trainer& t = trainer_;
  if (t.profiler_.enabled() && t.is_global_zero()) {
    Logger::Instance().Info("simple profiler: wall time per phase of fit (each phase its own time only)");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t.start_).count();
    for (const std::string& line : t.profiler_.Report(seconds)) Logger::Instance().Info(line);
  }
  if (t.operator_trace_) {
    if (t.operator_trace_->Finish()) {
      Logger::Instance().Info(absl::StrCat(
          "advanced profiler: LibTorch's operator profile of training batches ",
          t.operator_trace_->first() + 1, "-",
          t.operator_trace_->first() + t.operator_trace_->count(), " of the run in ",
          t.operator_trace_->path(), " (open in chrome://tracing or ui.perfetto.dev)"));
    } else {
      Logger::Instance().Warning(absl::StrCat("advanced profiler: the run trained fewer than ",
                                              t.operator_trace_->first() + 1,
                                              " batches; no operator trace written"));
    }
    t.operator_trace_.reset();
  }
}

absl::StatusOr<int64_t> FitLoop::SetupData(const FitInputs& inputs) {
  Trainer& t = trainer_;
  const TrainerOptions& options = t.options_;
  data::DataModule& dm = *inputs.data;
  KILN_RETURN_IF_ERROR(dm.PrepareData());
  KILN_RETURN_IF_ERROR(dm.Setup(data::Stage::kFit));
  auto train_ds = dm.train_dataset();
  if (!train_ds) return absl::FailedPreconditionError("the data module has no training split");
  data::LoaderOptions lo = dm.loader_options();
  lo.seed = inputs.seed;
  t.batch_size_ = lo.batch_size;
  std::shared_ptr<const data::Dataset> val_ds = dm.val_dataset();
  bool shuffle = true;
  if (options.overfit_batches > 0) {
    // The same few batches, in order, for training and validation.
    std::vector<int64_t> first(static_cast<size_t>(std::min(train_ds->size(), options.overfit_batches * lo.batch_size)));
    std::iota(first.begin(), first.end(), 0);
    train_ds = data::Subset(train_ds, first);
    val_ds = train_ds;
    shuffle = false;
  }
  // Each rank reads its part of the epoch's order (PyTorch's DistributedSampler; shards split by
  // position in the epoch's stream).
  int64_t rank = t.strategy_.distributed() ? t.global_rank() : 0;
  int64_t world = t.strategy_.distributed() ? t.world_size() : 1;
  std::shared_ptr<data::Sampler> train_sampler = data::SamplerFor(*train_ds, shuffle, inputs.seed, rank, world);
  std::shared_ptr<data::Sampler> val_sampler = val_ds ? data::SamplerFor(*val_ds, false, inputs.seed, rank, world) : nullptr;
  train_loader_ = std::make_unique<data::DataLoader>(train_ds, train_sampler, lo);
  if (val_ds) {
    val_loader_ = std::make_unique<data::DataLoader>(val_ds, val_sampler, lo);
    validation_ = std::make_unique<EvaluationLoop>(t, *val_loader_, "val");
  }
  return train_ds->size();

}

absl::StatusOr<bool> FitLoop::Restore(const FitInputs& inputs) {
  if (inputs.ckpt_path.empty()) return false;
  std::string path = inputs.ckpt_path;
  if (path == "last") path = trainer_.checkpoint_dir_ + "/last.ckpt";
  if (path == "best") {
    return absl::InvalidArgumentError("ckpt_path=best only applies to validate/test/predict; fit resumes from last or a path");
  }
  struct stat st;
  if (inputs.ckpt_path == "last" && ::stat(path.c_str(), &st) != 0) {
    Logger::Instance().Info(absl::StrCat("ckpt_path=last: no checkpoint at ", path, " yet; starting fresh"));
    return false;
  }
  KILN_RETURN_IF_ERROR(trainer_.ResumeFrom(path));
  return true;
}

absl::Status FitLoop::Interrupted(int signal) {
  Trainer& t = trainer_;
  std::string path = t.checkpoint_dir_ + "/last.ckpt";
  absl::Status saved = absl::OkStatus();
  if (t.checkpointing_enabled()) {
    saved = MakeDirs(t.checkpoint_dir_);
    if (saved.ok()) saved = t.SaveCheckpoint(path);
  }
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
  return WithExitCode(absl::AbortedError(absl::StrCat(
                          "interrupted by ", name, " at epoch ", t.epoch_, ", step ", t.global_step_,
                          saved.ok() ? absl::StrCat("; resume with ckpt_path=", path)
                                     : absl::StrCat("; could not save a checkpoint: ", saved.message()))),
                      128 + signal);
}

}  // namespace kiln
