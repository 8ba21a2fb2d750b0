#include "lib/trainer/trainer.h"

#include <sys/stat.h>

#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/core/files.h"
#include "lib/core/status_macros.h"
#include "lib/core/torch_compat.h"
#include "lib/distributed/data_parallel.h"
#include "lib/logging/logger.h"
#include "lib/trainer/checkpoint.h"
#include "lib/trainer/checkpoint_connector.h"
#include "lib/trainer/process_settings.h"

namespace kiln {
namespace {

std::string FormatMetrics(const std::map<std::string, double>& metrics) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : metrics) parts.push_back(absl::StrFormat("%s %.4f", k, v));
  return absl::StrJoin(parts, "  ");
}

}  // namespace

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<MetricsLogger>> loggers)
    : options_(std::move(options)), loggers_(std::move(loggers)) {
  // Callback order: as listed, except those that must run last (checkpointing).
  for (auto& c : callbacks) {
    if (!c->runs_last()) callbacks_.push_back(c);
  }
  for (auto& c : callbacks) {
    if (c->runs_last()) callbacks_.push_back(c);
  }
  checkpoint_dir_ = options_.default_root_dir + "/checkpoints";
}

int Trainer::ConfigureCpu() const {
  int local_workers = 1;
  if (distributed()) {
    local_workers = world_size();
    std::string local = distributed::ProcessEnv("LOCAL_WORLD_SIZE");
    if (!local.empty()) local_workers = std::max(1, std::atoi(local.c_str()));
  }
  return ConfigureProcess(options_.num_threads, local_workers);
}

int Trainer::global_rank() const { return group_ ? group_->rank() : 0; }
int Trainer::world_size() const { return group_ ? group_->world_size() : 1; }

absl::StatusOr<bool> Trainer::AnyRank(bool local) {
  if (!distributed()) return local;
  torch::Tensor flag = torch::tensor({local ? 1.0 : 0.0}, torch::kFloat64);
  KILN_RETURN_IF_ERROR(group_->AllReduce(flag, c10d::ReduceOp::MAX));
  return flag.item<double>() > 0;
}

absl::Status Trainer::AverageOverRanks(std::map<std::string, double>& means) {
  if (!distributed() || means.empty()) return absl::OkStatus();
  std::vector<double> values;
  for (const auto& [name, value] : means) values.push_back(value);
  torch::Tensor sums = torch::tensor(values, torch::kFloat64);
  KILN_RETURN_IF_ERROR(group_->AllReduce(sums));
  size_t i = 0;
  for (auto& [name, value] : means) value = sums[static_cast<int64_t>(i++)].item<double>() / world_size();
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::StopAfterThisStep() {
  bool step_limit = options_.max_steps > 0 && global_step_ >= options_.max_steps;
  int signal = StopSignals::Received();
  bool local = OutOfTime() || stop_now_;
  if (distributed()) {
    // A signal may reach one rank first, and clocks differ: all ranks stop at the same step or none.
    torch::Tensor flags = torch::tensor({static_cast<double>(signal), local ? 1.0 : 0.0}, torch::kFloat64);
    KILN_RETURN_IF_ERROR(group_->AllReduce(flags, c10d::ReduceOp::MAX));
    signal = static_cast<int>(flags[0].item<double>());
    if (flags[1].item<double>() > 0 && !local) RequestStop("another rank reached its time limit");
    local = flags[1].item<double>() > 0;
    if (local) stop_now_ = true;
  }
  stop_signal_ = signal;
  return signal != 0 || step_limit || local;
}

absl::Status Trainer::StartDataParallel() {
  if (!distributed()) return absl::OkStatus();
  data_parallel_ = std::make_shared<distributed::DataParallel>(group_, inputs_.task->module(), options_.ddp_bucket_cap_mb);
  KILN_RETURN_IF_ERROR(data_parallel_->SyncModuleStates());
  // One blocking all-reduce of a gradient-sized buffer: what a step would pay if nothing overlapped.
  int64_t numel = 0;
  for (const auto& p : inputs_.task->module().parameters()) numel += p.numel();
  torch::Tensor probe = torch::zeros({numel}, torch::kFloat32);
  KILN_RETURN_IF_ERROR(group_->AllReduce(probe));
  constexpr int kRounds = 5;
  auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) KILN_RETURN_IF_ERROR(group_->AllReduce(probe));
  allreduce_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count() / kRounds;
  Logger::Instance().Info(absl::StrFormat(
      "data parallel: %d ranks over %s; %d gradient buckets (cap %g MB); one all-reduce of all %.2f MB of "
      "gradients takes %.2f ms",
      world_size(), group_->backend(), data_parallel_->num_buckets(), options_.ddp_bucket_cap_mb,
      static_cast<double>(numel) * 4 / (1024.0 * 1024.0), allreduce_ms_));
  return absl::OkStatus();
}

absl::Status Trainer::AdaptPosition(int64_t saved_world_size, int64_t saved_batch_size, const std::string& path) {
  int64_t per_step = world_size() * batch_size_;
  if (saved_world_size * saved_batch_size == per_step || batch_in_epoch_ == 0) return absl::OkStatus();
  // Batch b of every rank covers positions [b*W*B, (b+1)*W*B) of the epoch's order whatever the
  // world size W and batch size B, so a position carries over when the new W*B divides it.
  int64_t samples = batch_in_epoch_ * saved_world_size * saved_batch_size;
  if (samples % per_step != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " stopped mid-epoch after ", samples, " samples (", saved_world_size, " ranks x batch ",
        saved_batch_size, "); ", world_size(), " ranks x batch ", batch_size_,
        " cannot continue from there: choose sizes whose product divides ", samples,
        ", or resume from an end-of-epoch checkpoint"));
  }
  batch_in_epoch_ = samples / per_step;
  return absl::OkStatus();
}

double Trainer::elapsed_seconds() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool Trainer::OutOfTime() const { return options_.max_time.has_value() && elapsed_seconds() >= *options_.max_time; }

void Trainer::RequestStopNow(const std::string& reason) {
  if (epoch_ < options_.min_epochs) return;
  stop_now_ = true;
  RequestStop(reason);
}

void Trainer::RequestStop(const std::string& reason) {
  stop_requested_ = true;
  stop_reason_ = reason;
}

absl::Status Trainer::ForEachCallback(const std::function<absl::Status(Callback&)>& fn) {
  for (auto& c : callbacks_) KILN_RETURN_IF_ERROR(fn(*c));
  return absl::OkStatus();
}

void Trainer::LogToLoggers(const std::map<std::string, double>& metrics) {
  if (!is_global_zero()) return;
  for (auto& logger : loggers_) {
    auto st = logger->LogMetrics(metrics, global_step_);
    if (!st.ok()) Logger::Instance().Warning(std::string(st.message()));
  }
}

torch::Tensor Trainer::ToDevice(const torch::Tensor& t) const {
  return t.device() == device_ ? t : t.to(device_, /*non_blocking=*/true);
}

namespace {
// NHWC strides even where contiguous() would keep NCHW ones: with one channel both orders are
// "contiguous", and the convolution then picks NCHW and converts back and forth.
torch::Tensor ToChannelsLast(const torch::Tensor& t) {
  return torch::empty_like(t, t.options().memory_format(torch::MemoryFormat::ChannelsLast)).copy_(t);
}
}  // namespace

torch::Tensor Trainer::InputToDevice(const torch::Tensor& t) const {
  torch::Tensor on_device = ToDevice(t);
  return options_.channels_last && on_device.dim() == 4 ? ToChannelsLast(on_device) : on_device;
}

void Trainer::PlaceModule(torch::nn::Module& module) const {
  module.to(device_);
  if (!options_.channels_last) return;
  // torch::nn::Module::to has no memory-format overload (Python's has): convert the 4-D tensors.
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(ToChannelsLast(p.data()));
  }
}

FitParts Trainer::Parts() const {
  FitParts parts;
  parts.task = inputs_.task;
  parts.optimizer = optimizer_.get();
  parts.scheduler = inputs_.scheduler.get();
  parts.callbacks = &callbacks_;
  parts.model_name = inputs_.model_name;
  parts.config_yaml = inputs_.config_yaml;
  return parts;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  if (!is_global_zero()) return absl::OkStatus();  // the ranks hold the same state; rank 0 writes it
  LoopPosition loop;
  loop.global_step = global_step_;
  loop.epoch = epoch_;
  loop.batch_in_epoch = batch_in_epoch_;
  loop.micro_batches = micro_batches_;
  loop.samples = samples_;
  loop.elapsed_seconds = elapsed_seconds();
  loop.seed = static_cast<int64_t>(inputs_.seed);
  loop.world_size = world_size();
  loop.batch_size = batch_size_;
  return SaveFitCheckpoint(path, Parts(), loop);
}

absl::Status Trainer::LoadWeights(const std::string& path, Task& task, const std::string& model_name) {
  return LoadCheckpointWeights(path, task, model_name);
}

absl::Status Trainer::ResumeFrom(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(LoopPosition loop,
                        RestoreFitCheckpoint(
                            path, Parts(), [this](torch::nn::Module& module) { PlaceModule(module); }, batch_size_));
  global_step_ = loop.global_step;
  epoch_ = loop.epoch;
  batch_in_epoch_ = loop.batch_in_epoch;
  micro_batches_ = loop.micro_batches;
  samples_ = loop.samples;
  elapsed_before_ = loop.elapsed_seconds;
  KILN_RETURN_IF_ERROR(AdaptPosition(loop.world_size, loop.batch_size, path));
  Logger::Instance().Info(absl::StrCat("resumed from ", path, " at epoch ", epoch_, ", batch ", batch_in_epoch_,
                                       ", step ", global_step_));
  return absl::OkStatus();
}

absl::Status Trainer::Fit(const FitInputs& inputs) {
  inputs_ = inputs;
  Task& task = *inputs.task;
  data::DataModule& dm = *inputs.data;
  start_ = std::chrono::steady_clock::now();

  int threads = ConfigureCpu();
  at::globalContext().setDeterministicAlgorithms(options_.deterministic, /*warn_only=*/false);
  torch::manual_seed(inputs.seed);
  bool cuda = torch::cuda::is_available();
  if (options_.accelerator == TrainerOptions::Accelerator::kCuda && !cuda) {
    return absl::FailedPreconditionError("trainer.accelerator=cuda, but no CUDA device is available");
  }
  device_ = (options_.accelerator != TrainerOptions::Accelerator::kCpu && cuda) ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  KILN_RETURN_IF_ERROR(dm.PrepareData());
  KILN_RETURN_IF_ERROR(dm.Setup(data::Stage::kFit));
  auto train_ds = dm.train_dataset();
  if (!train_ds) return absl::FailedPreconditionError("the data module has no training split");
  data::LoaderOptions lo = dm.loader_options();
  lo.seed = inputs.seed;
  batch_size_ = lo.batch_size;
  std::shared_ptr<const data::Dataset> val_ds = dm.val_dataset();
  std::shared_ptr<data::Sampler> train_sampler = data::RandomSampler(train_ds->size(), inputs.seed);
  std::shared_ptr<data::Sampler> val_sampler = val_ds ? data::SequentialSampler(val_ds->size()) : nullptr;
  if (options_.overfit_batches > 0) {
    // The same few batches, in order, for training and validation.
    std::vector<int64_t> first(static_cast<size_t>(std::min(train_ds->size(), options_.overfit_batches * lo.batch_size)));
    std::iota(first.begin(), first.end(), 0);
    train_ds = data::Subset(train_ds, first);
    val_ds = train_ds;
    train_sampler = data::SequentialSampler(train_ds->size());
    val_sampler = data::SequentialSampler(val_ds->size());
  }
  if (distributed()) {
    // Each rank reads every world_size-th sample of the epoch's order (PyTorch's DistributedSampler).
    train_sampler = data::DistributedSampler(train_sampler, global_rank(), world_size());
    if (val_sampler) val_sampler = data::DistributedSampler(val_sampler, global_rank(), world_size());
  }
  data::DataLoader train_loader(train_ds, train_sampler, lo);
  std::unique_ptr<data::DataLoader> val_loader;
  if (val_ds) val_loader = std::make_unique<data::DataLoader>(val_ds, val_sampler, lo);

  train_batches_ = options_.limit_train_batches.Of(train_loader.num_batches());
  if (options_.fast_dev_run > 0) train_batches_ = std::min(train_batches_, options_.fast_dev_run);
  if (train_batches_ <= 0) return absl::FailedPreconditionError("no training batches (check limit_train_batches)");
  int64_t max_epochs = options_.fast_dev_run > 0 ? 1 : options_.max_epochs;
  int64_t steps_per_epoch = (train_batches_ + options_.accumulate_grad_batches - 1) / options_.accumulate_grad_batches;
  int64_t total_steps = options_.max_steps > 0 ? options_.max_steps : steps_per_epoch * max_epochs;

  PlaceModule(task.module());
  NamedParameters params;
  for (const auto& p : task.module().named_parameters()) params.emplace_back(p.key(), p.value());
  KILN_ASSIGN_OR_RETURN(optimizer_, inputs.optimizer->Create(params));
  if (inputs.scheduler) KILN_RETURN_IF_ERROR(inputs.scheduler->Attach(optimizer_.get(), total_steps, steps_per_epoch));

  StopSignals signals;
  KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnFitStart(*this); }));

  bool resumed = false;
  if (!inputs.ckpt_path.empty()) {
    std::string path = inputs.ckpt_path;
    if (path == "last") path = checkpoint_dir_ + "/last.ckpt";
    if (path == "best") {
      return absl::InvalidArgumentError("ckpt_path=best only applies to validate/test/predict; fit resumes from last or a path");
    }
    struct stat st;
    if (inputs.ckpt_path == "last" && ::stat(path.c_str(), &st) != 0) {
      Logger::Instance().Info(absl::StrCat("ckpt_path=last: no checkpoint at ", path, " yet; starting fresh"));
    } else {
      KILN_RETURN_IF_ERROR(ResumeFrom(path));
      resumed = true;
    }
  }
  KILN_RETURN_IF_ERROR(StartDataParallel());

  if (val_loader && options_.num_sanity_val_steps > 0 && !resumed && options_.fast_dev_run == 0) {
    // A few validation batches first, so a broken validation step fails before hours of training.
    KILN_RETURN_IF_ERROR(RunEvaluation(*val_loader, options_.num_sanity_val_steps, "val").status());
  }

  Logger::Instance().Info(absl::StrCat("training on ", device_.is_cuda() ? "cuda" : "cpu", " with ", threads,
                                       " threads", distributed() ? absl::StrCat(" per rank, ", world_size(), " ranks") : "",
                                       device_.is_cuda() ? "" : BlasKernelsNote(),
                                       ": ", train_ds->size(), " samples, ", train_batches_,
                                       " batches per epoch", distributed() ? " per rank" : "", ", up to ", max_epochs,
                                       " epochs"));
  absl::Status status;
  while (epoch_ < max_epochs && !stop_requested_) {
    if (options_.max_steps > 0 && global_step_ >= options_.max_steps) break;
    auto out_of_time = AnyRank(OutOfTime());
    if (!out_of_time.ok()) {
      status = out_of_time.status();
      break;
    }
    if (*out_of_time) {
      Logger::Instance().Info("max_time reached");
      break;
    }
    bool interrupted = false;
    int64_t first = batch_in_epoch_;
    status = RunEpoch(train_loader, first, val_loader.get(), &interrupted);
    if (!status.ok() || interrupted) break;
  }
  // Alone, a signal that came after the last step still stops with a checkpoint; with several
  // ranks only the signal they agreed on at a step boundary counts, so all of them end alike.
  int signal = distributed() ? stop_signal_ : StopSignals::Received();
  if (status.ok() && signal != 0) {
    std::string path = checkpoint_dir_ + "/last.ckpt";
    absl::Status saved = absl::OkStatus();
    if (checkpointing_enabled()) {
      saved = MakeDirs(checkpoint_dir_);
      if (saved.ok()) saved = SaveCheckpoint(path);
    }
    status = WithExitCode(absl::AbortedError(absl::StrCat(
                              "interrupted by ", signal == SIGINT ? "SIGINT" : signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM", " at epoch ", epoch_,
                              ", step ", global_step_,
                              saved.ok() ? absl::StrCat("; resume with ckpt_path=", path)
                                         : absl::StrCat("; could not save a checkpoint: ", saved.message()))),
                          128 + signal);
  }
  if (!status.ok()) {
    for (auto& c : callbacks_) c->OnException(*this, status);
    return status;
  }
  KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnFitEnd(*this); }));
  if (distributed()) KILN_RETURN_IF_ERROR(group_->Barrier());
  for (auto& logger : loggers_) KILN_RETURN_IF_ERROR(logger->Finish());
  Logger::Instance().Info(absl::StrFormat("fit done: %d epochs, %d optimizer steps, %d samples in %.1f s%s", epoch_,
                                          global_step_, samples_, elapsed_seconds(),
                                          stop_reason_.empty() ? "" : " (" + stop_reason_ + ")"));
  return absl::OkStatus();
}

absl::Status Trainer::RunEpoch(data::DataLoader& loader, int64_t first_batch, data::DataLoader* val_loader,
                               bool* interrupted) {
  Task& task = *inputs_.task;
  task.module().train();
  if (first_batch == 0) train_log_.ResetEpoch();
  KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnTrainEpochStart(*this); }));
  auto epoch_start = std::chrono::steady_clock::now();
  int64_t samples_at_start = samples_;
  int64_t val_every = 0;  // mid-epoch validation every N batches
  if (!options_.val_check_interval.fraction) {
    val_every = static_cast<int64_t>(options_.val_check_interval.value);
  } else if (options_.val_check_interval.value < 1.0) {
    val_every = std::max<int64_t>(1, options_.val_check_interval.Of(train_batches_));
  }
  bool stop_mid_epoch = false;
  auto status = loader.Run(epoch_, first_batch, train_batches_, [&](data::Batch& batch) -> absl::StatusOr<bool> {
    bool last = batch.index + 1 == train_batches_;
    bool stepped = false;
    KILN_RETURN_IF_ERROR(TrainStep(batch, last, &stepped));
    batch_in_epoch_ = batch.index + 1;
    bool at_step_boundary = batch_in_epoch_ % options_.accumulate_grad_batches == 0 || last;
    if (val_loader && val_every > 0 && !last && batch_in_epoch_ % val_every == 0) {
      KILN_RETURN_IF_ERROR(Validate(*val_loader));
      task.module().train();
    }
    if (at_step_boundary) {
      KILN_ASSIGN_OR_RETURN(bool stop, StopAfterThisStep());
      if (stop) {
        stop_mid_epoch = true;
        return false;
      }
    }
    return true;
  });
  KILN_RETURN_IF_ERROR(status);
  if (stop_mid_epoch && batch_in_epoch_ < train_batches_) {
    *interrupted = true;
    if (stop_signal_ == 0 && checkpointing_enabled()) {
      // max_steps or max_time ended training mid-epoch: keep a resumable checkpoint.
      KILN_RETURN_IF_ERROR(MakeDirs(checkpoint_dir_));
      KILN_RETURN_IF_ERROR(SaveCheckpoint(checkpoint_dir_ + "/last.ckpt"));
    }
    return absl::OkStatus();
  }

  auto means = train_log_.EpochMeans();
  KILN_RETURN_IF_ERROR(AverageOverRanks(means));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
  for (const auto& [k, v] : means) callback_metrics_[k] = v;
  bool validate = val_loader && (epoch_ + 1) % options_.check_val_every_n_epoch == 0;
  if (validate) KILN_RETURN_IF_ERROR(Validate(*val_loader));
  if (inputs_.scheduler && inputs_.scheduler->interval() == Scheduler::Interval::kEpoch) {
    double metric = std::nan("");
    auto it = callback_metrics_.find(inputs_.scheduler->monitor());
    if (it != callback_metrics_.end()) metric = it->second;
    inputs_.scheduler->Step(metric);
  }
  std::map<std::string, double> epoch_metrics;
  for (const auto& [k, v] : means) epoch_metrics[k + "_epoch"] = v;
  epoch_metrics["epoch"] = static_cast<double>(epoch_);
  LogToLoggers(epoch_metrics);
  Logger::Instance().Info(absl::StrFormat("epoch %d: %s  (%.1f s, %.0f samples/s)", epoch_,
                                          FormatMetrics(callback_metrics_), seconds,
                                          static_cast<double>(samples_ - samples_at_start) / std::max(seconds, 1e-9)));
  // Checkpoints written at the end of the epoch resume at the next one.
  ++epoch_;
  batch_in_epoch_ = 0;
  KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnTrainEpochEnd(*this); }));
  if (stop_requested_ && epoch_ < options_.min_epochs) {
    Logger::Instance().Info(absl::StrCat("not stopping before min_epochs=", options_.min_epochs));
    stop_requested_ = false;
    stop_reason_.clear();
  }
  return absl::OkStatus();
}

absl::Status Trainer::TrainStep(data::Batch& batch, bool last_in_epoch, bool* stepped) {
  Task& task = *inputs_.task;
  batch.input = InputToDevice(batch.input);
  batch.target = ToDevice(batch.target);
  KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnTrainBatchStart(*this, batch); }));
  if (data_parallel_) KILN_RETURN_IF_ERROR(data_parallel_->BroadcastBuffers());
  bool bf16 = options_.precision == TrainerOptions::Precision::kBf16Mixed;
  if (bf16) compat::SetCpuAutocast(true, at::kBFloat16);
  auto loss = task.TrainingStep(batch, train_log_);
  if (bf16) compat::SetCpuAutocast(false, at::kBFloat16);
  if (!loss.ok()) return loss.status();
  double loss_value = loss->item<double>();
  if (distributed()) {
    // Every rank skips or stops on a non-finite loss together, or their collectives would pair up wrongly.
    KILN_ASSIGN_OR_RETURN(bool nonfinite, AnyRank(!std::isfinite(loss_value)));
    if (nonfinite && std::isfinite(loss_value)) loss_value = std::nan("");
  }
  ++micro_batches_;
  samples_ += batch.size() * world_size();
  if (!std::isfinite(loss_value)) {
    std::string where = absl::StrCat("epoch ", epoch_, ", batch ", batch.index, ", step ", global_step_);
    if (options_.on_nonfinite_loss == TrainerOptions::NonFiniteLoss::kStop) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the loss is ", loss_value, " at ", where,
          "; stopped without writing a checkpoint (lower the learning rate, or set trainer.on_nonfinite_loss=skip)"));
    }
    Logger::Instance().Warning(absl::StrCat("skipping a step with loss ", loss_value, " at ", where));
    optimizer_->zero_grad();
    return absl::OkStatus();
  }
  bool boundary = (batch.index + 1) % options_.accumulate_grad_batches == 0 || last_in_epoch;
  torch::Tensor scaled = *loss / static_cast<double>(options_.accumulate_grad_batches);
  if (data_parallel_) {
    // Micro-steps accumulate locally; the step's last backward averages the sum over ranks.
    if (boundary) data_parallel_->PrepareSyncedBackward();
    KILN_RETURN_IF_ERROR(group_->Guard("backward with gradient all-reduce", [&] { scaled.backward(); }));
  } else {
    scaled.backward();
  }
  if (boundary) {
    KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnBeforeOptimizerStep(*this); }));
    if (options_.gradient_clip_val.has_value()) {
      auto parameters = task.module().parameters();
      if (options_.gradient_clip_algorithm == TrainerOptions::ClipAlgorithm::kNorm) {
        torch::nn::utils::clip_grad_norm_(parameters, *options_.gradient_clip_val);
      } else {
        torch::nn::utils::clip_grad_value_(parameters, *options_.gradient_clip_val);
      }
    }
    optimizer_->step();
    optimizer_->zero_grad();
    ++global_step_;
    *stepped = true;
    if (inputs_.scheduler && inputs_.scheduler->interval() == Scheduler::Interval::kStep) {
      inputs_.scheduler->Step(std::nan(""));
    }
    if (global_step_ % options_.log_every_n_steps == 0) {
      std::map<std::string, double> metrics = train_log_.last();
      auto& group = optimizer_->param_groups()[0];
      metrics["lr"] = group.options().get_lr();
      metrics["epoch"] = static_cast<double>(epoch_);
      LogToLoggers(metrics);
    }
  }
  return ForEachCallback([&](Callback& c) { return c.OnTrainBatchEnd(*this, batch, loss_value); });
}

absl::StatusOr<std::map<std::string, double>> Trainer::RunEvaluation(data::DataLoader& loader, int64_t max_batches,
                                                                     const std::string& stage) {
  Task& task = *inputs_.task;
  task.module().eval();
  torch::NoGradGuard no_grad;
  MetricLog log;
  bool bf16 = options_.precision == TrainerOptions::Precision::kBf16Mixed;
  auto status = loader.Run(0, 0, max_batches, [&](data::Batch& batch) -> absl::StatusOr<bool> {
    batch.input = InputToDevice(batch.input);
    batch.target = ToDevice(batch.target);
    if (bf16) compat::SetCpuAutocast(true, at::kBFloat16);
    auto st = task.EvaluationStep(batch, stage, log);
    if (bf16) compat::SetCpuAutocast(false, at::kBFloat16);
    KILN_RETURN_IF_ERROR(st);
    return true;
  });
  KILN_RETURN_IF_ERROR(status);
  return log.EpochMeans();
}

absl::Status Trainer::Validate(data::DataLoader& loader) {
  KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnValidationStart(*this); }));
  int64_t batches = options_.limit_val_batches.Of(loader.num_batches());
  if (options_.fast_dev_run > 0) batches = std::min(batches, options_.fast_dev_run);
  KILN_ASSIGN_OR_RETURN(auto metrics, RunEvaluation(loader, batches, "val"));
  KILN_RETURN_IF_ERROR(AverageOverRanks(metrics));
  for (const auto& [k, v] : metrics) callback_metrics_[k] = v;
  LogToLoggers(metrics);
  return ForEachCallback([&](Callback& c) { return c.OnValidationEnd(*this, metrics); });
}

absl::StatusOr<std::map<std::string, double>> Trainer::Evaluate(Task& task, data::DataModule& dm, data::Stage stage) {
  inputs_.task = &task;
  start_ = std::chrono::steady_clock::now();
  ConfigureCpu();
  PlaceModule(task.module());
  KILN_RETURN_IF_ERROR(dm.PrepareData());
  KILN_RETURN_IF_ERROR(dm.Setup(stage));
  bool test = stage == data::Stage::kTest;
  auto ds = test ? dm.test_dataset() : dm.val_dataset();
  if (!ds) return absl::FailedPreconditionError(absl::StrCat("the data module has no ", test ? "test" : "validation", " split"));
  data::LoaderOptions lo = dm.loader_options();
  data::DataLoader loader(ds, data::SequentialSampler(ds->size()), lo);
  const BatchLimit& limit = test ? options_.limit_test_batches : options_.limit_val_batches;
  int64_t batches = limit.Of(loader.num_batches());
  if (options_.fast_dev_run > 0) batches = std::min(batches, options_.fast_dev_run);
  KILN_ASSIGN_OR_RETURN(auto metrics, RunEvaluation(loader, batches, test ? "test" : "val"));
  LogToLoggers(metrics);
  if (test) KILN_RETURN_IF_ERROR(ForEachCallback([&](Callback& c) { return c.OnTestEnd(*this, metrics); }));
  Logger::Instance().Info(absl::StrCat(test ? "test: " : "validation: ", FormatMetrics(metrics)));
  return metrics;
}

absl::StatusOr<std::vector<torch::Tensor>> Trainer::Predict(Task& task, data::DataModule& dm) {
  inputs_.task = &task;
  PlaceModule(task.module());
  task.module().eval();
  KILN_RETURN_IF_ERROR(dm.PrepareData());
  KILN_RETURN_IF_ERROR(dm.Setup(data::Stage::kPredict));
  auto ds = dm.predict_dataset();
  if (!ds) return absl::FailedPreconditionError("the data module has no prediction inputs");
  data::DataLoader loader(ds, data::SequentialSampler(ds->size()), dm.loader_options());
  int64_t batches = options_.limit_predict_batches.Of(loader.num_batches());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> outputs;
  KILN_RETURN_IF_ERROR(loader.Run(0, 0, batches, [&](data::Batch& batch) -> absl::StatusOr<bool> {
    batch.input = InputToDevice(batch.input);
    KILN_ASSIGN_OR_RETURN(torch::Tensor out, task.PredictStep(batch));
    outputs.push_back(out.to(torch::kCPU));
    return true;
  }));
  return outputs;
}

}  // namespace kiln
