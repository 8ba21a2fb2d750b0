#include "lib/tuner/lr_finder.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/node.h"
#include "lib/logging/logger.h"

namespace kiln {

const OptionBinding<LrFindOptions>& LrFindOptions::Binding() {
  using O = LrFindOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("min_lr", &O::min_lr, "the lr of the first step", GreaterThan(0))
          .Field("max_lr", &O::max_lr, "the lr of the last step (greater than min_lr)",
                 GreaterThan(0))
          .Field("num_training", &O::num_training,
                 "optimizer steps of the sweep (at least skip_begin + skip_end + 2)",
                 GreaterThan(0))
          .Field("mode", &O::mode, "how the lr grows from step to step",
                 OneOf({"exponential", "linear"}))
          .Field("early_stop_threshold", &O::early_stop_threshold,
                 "stop when the smoothed loss exceeds this times the best one (null: never)",
                 GreaterThan(0))
          .Field("skip_begin", &O::skip_begin, "points left out of the suggestion at the start",
                 AtLeast(0))
          .Field("skip_end", &O::skip_end, "points left out of the suggestion at the end",
                 AtLeast(0))
          .Field("apply", &O::apply,
                 "then train with the suggestion as optimizer.lr (also: --apply)"));
  return *binding;
}

absl::StatusOr<LrFindOptions> LrFindOptions::FromConfig(const config::Config& job) {
  const std::string key = "tuner.lr_find";
  const std::string component = "kiln tune lr_find";
  config::NodePtr node = config::Node::Map();
  if (job.Has(key)) {
    KILN_ASSIGN_OR_RETURN(node, job.Get<config::NodePtr>(key));
  }
  if (node->is_null()) node = config::Node::Map();
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled, Binding().schema().Apply(*node, key, component));
  config::Config options(filled, key);
  LrFindOptions o = Binding().Fill(options);
  OptionContext context(options, component);
  if (o.min_lr >= o.max_lr) {
    return context.Refuse(
        "max_lr", absl::StrCat("greater than min_lr (", config::PythonFloatRepr(o.min_lr), ")"));
  }
  const int64_t least = o.skip_begin + o.skip_end + 2;
  if (o.num_training < least) {
    return context.Refuse("num_training", absl::StrCat("at least skip_begin + skip_end + 2 (",
                                                       least, "), the points a suggestion needs"));
  }
  return o;
}

double SweepLearningRate(const LrFindOptions& options, int64_t step) {
  if (options.num_training <= 1) return options.min_lr;
  double r = static_cast<double>(step) / static_cast<double>(options.num_training - 1);
  if (options.mode == "linear") return options.min_lr + r * (options.max_lr - options.min_lr);
  return options.min_lr * std::pow(options.max_lr / options.min_lr, r);
}

std::optional<size_t> SteepestDescent(const std::vector<double>& lrs,
                                      const std::vector<double>& smoothed, int64_t skip_begin,
                                      int64_t skip_end, bool log_scale) {
  std::vector<double> x, y;
  std::vector<size_t> index;
  const int64_t n = static_cast<int64_t>(std::min(lrs.size(), smoothed.size()));
  for (int64_t i = skip_begin; i < n - skip_end; ++i) {
    if (!std::isfinite(smoothed[i])) continue;
    x.push_back(log_scale ? std::log(lrs[i]) : lrs[i]);
    y.push_back(smoothed[i]);
    index.push_back(static_cast<size_t>(i));
  }
  if (y.size() < 2) return std::nullopt;
  auto options = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor xs = torch::from_blob(x.data(), {static_cast<int64_t>(x.size())}, options).clone();
  torch::Tensor ys = torch::from_blob(y.data(), {static_cast<int64_t>(y.size())}, options).clone();
  std::vector<torch::Tensor> coordinates = {xs};
  torch::Tensor gradient =
      torch::gradient(ys, coordinates, c10::optional<int64_t>(0), /*edge_order=*/1)[0];
  return index[static_cast<size_t>(gradient.argmin().item<int64_t>())];
}

namespace {

// The sweep's schedule in place of the job's (Lightning's _ExponentialLR/_LinearLR): the first
// parameter group's lr is the sweep's, the other groups keep their ratio to it.
class LrSweepSchedule : public Scheduler {
 public:
  explicit LrSweepSchedule(const LrFindOptions& options) : options_(options) {}

  absl::Status Attach(torch::optim::Optimizer* optimizer, int64_t, int64_t) override {
    optimizer_ = optimizer;
    auto& groups = optimizer->param_groups();
    if (groups.empty())
      return absl::FailedPreconditionError("lr_find: the optimizer has no parameters to train");
    double first = groups[0].options().get_lr();
    for (auto& group : groups)
      ratios_.push_back(first > 0 ? group.options().get_lr() / first : 1.0);
    Apply();
    return absl::OkStatus();
  }
  void Step(double) override {
    ++step_;
    Apply();
  }
  Interval interval() const override { return Interval::kStep; }
  void Save(torch::serialize::OutputArchive&) const override {}
  void Load(torch::serialize::InputArchive&) override {}

 private:
  void Apply() {
    double lr = SweepLearningRate(options_, step_);
    auto& groups = optimizer_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      groups[g].options().set_lr(lr * ratios_[std::min(g, ratios_.size() - 1)]);
  }

  LrFindOptions options_;
  torch::optim::Optimizer* optimizer_ = nullptr;
  std::vector<double> ratios_;
  int64_t step_ = 0;
};

// Records each optimizer step's lr and loss (Lightning's _LRCallback), smooths the loss and asks
// the trainer to stop when it diverges.
class LrFindRecorder : public Callback {
 public:
  LrFindRecorder(const LrFindOptions& options, LrFindResult* result)
      : options_(options), result_(result) {}

  std::string state_key() const override { return "LrFindRecorder"; }

  absl::Status OnTrainBatchStart(Trainer& t, const data::Batch&) override {
    // A batch that started and never ended had a non-finite loss: the loop skipped its step.
    if (in_batch_ && !done_)
      Record(t, t.optimizer()->param_groups()[0].options().get_lr(), std::nan(""));
    in_batch_ = true;
    return absl::OkStatus();
  }
  absl::Status OnBeforeOptimizerStep(Trainer& t) override {
    step_lr_ = t.optimizer()->param_groups()[0].options().get_lr();
    return absl::OkStatus();
  }
  absl::Status OnTrainBatchEnd(Trainer& t, const data::Batch&, double loss) override {
    in_batch_ = false;
    if (done_) return absl::OkStatus();
    loss_sum_ += loss;
    ++micro_batches_;
    if (t.global_step() == steps_seen_) return absl::OkStatus();  // accumulating gradients
    steps_seen_ = t.global_step();
    Record(t, step_lr_, loss_sum_ / static_cast<double>(micro_batches_));
    loss_sum_ = 0;
    micro_batches_ = 0;
    return absl::OkStatus();
  }
  // After the fit: a last batch whose loss was not finite.
  void Finish(Trainer& t) {
    if (in_batch_ && !done_ && t.optimizer() != nullptr) {
      Record(t, t.optimizer()->param_groups()[0].options().get_lr(), std::nan(""));
    }
  }

 private:
  void Record(Trainer& t, double lr, double loss) {
    const double n = static_cast<double>(result_->lrs.size() + 1);
    average_ = kLrFindBeta * average_ + (1 - kLrFindBeta) * loss;
    const double smoothed = average_ / (1 - std::pow(kLrFindBeta, n));
    result_->lrs.push_back(lr);
    result_->losses.push_back(loss);
    result_->smoothed.push_back(smoothed);
    if (!std::isfinite(loss)) {
      Stop(t, absl::StrFormat("the loss is %g at lr %.3g", loss, lr));
      return;
    }
    if (options_.early_stop_threshold.has_value() && n > 1 &&
        smoothed > *options_.early_stop_threshold * best_) {
      Stop(t, absl::StrFormat("the smoothed loss %.4g exceeded %g x the best %.4g at lr %.3g",
                              smoothed, *options_.early_stop_threshold, best_, lr));
    }
    if (n == 1 || smoothed < best_) best_ = smoothed;
  }
  void Stop(Trainer& t, const std::string& reason) {
    done_ = true;
    result_->stopped_early = reason;
    t.RequestStopNow(reason);
  }

  LrFindOptions options_;
  LrFindResult* result_;
  double average_ = 0, best_ = 0, step_lr_ = 0, loss_sum_ = 0;
  int64_t micro_batches_ = 0, steps_seen_ = 0;
  bool in_batch_ = false, done_ = false;
};

// Every parameter and buffer of a module (values, and parameters' gradients), to put back later.
class ModelSnapshot {
 public:
  explicit ModelSnapshot(torch::nn::Module& module) : training_(module.is_training()) {
    for (auto& p : module.parameters()) {
      params_.push_back({p, p.detach().clone(),
                         p.grad().defined() ? p.grad().detach().clone() : torch::Tensor()});
    }
    for (auto& b : module.buffers()) buffers_.push_back({b, b.detach().clone(), torch::Tensor()});
  }
  void Restore(torch::nn::Module& module) {
    torch::NoGradGuard no_grad;
    for (auto& e : params_) {
      e.live.copy_(e.value);
      if (e.grad.defined()) {
        e.live.mutable_grad() = e.grad.to(e.live.device());
      } else {
        e.live.mutable_grad() = torch::Tensor();
      }
    }
    for (auto& e : buffers_) e.live.copy_(e.value);
    module.train(training_);
  }

 private:
  struct Entry {
    torch::Tensor live, value, grad;
  };
  std::vector<Entry> params_, buffers_;
  bool training_;
};

}  // namespace

absl::StatusOr<LrFindResult> FindLearningRate(const TrainerOptions& trainer_options,
                                              const FitInputs& inputs,
                                              const LrFindOptions& options) {
  if (trainer_options.fast_dev_run > 0) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find: trainer.fast_dev_run is set; the finder needs "
        "tuner.lr_find.num_training steps (unset it)");
  }
  TrainerOptions sweep = trainer_options;
  sweep.max_steps = options.num_training;
  sweep.max_epochs = options.num_training;  // every epoch takes at least one optimizer step
  sweep.min_epochs = 0;
  sweep.max_time.reset();
  sweep.num_sanity_val_steps = 0;
  sweep.check_val_every_n_epoch = std::numeric_limits<int64_t>::max();
  sweep.val_check_interval = BatchLimit{};
  sweep.on_nonfinite_loss = TrainerOptions::NonFiniteLoss::kSkip;  // the recorder sees it and stops
  sweep.profiler = TrainerOptions::ProfilerKind::kNone;

  LrFindResult result;
  auto recorder = std::make_shared<LrFindRecorder>(options, &result);
  Trainer trainer(sweep, {recorder}, {});
  trainer.set_checkpointing_enabled(false);
  FitInputs sweep_inputs = inputs;
  sweep_inputs.scheduler = std::make_shared<LrSweepSchedule>(options);
  sweep_inputs.ckpt_path.clear();

  torch::nn::Module& module = inputs.task->module();
  ModelSnapshot snapshot(module);
  Logger::Instance().Info(absl::StrFormat("lr_find: %d steps, lr from %g to %g (%s)",
                                          options.num_training, options.min_lr, options.max_lr,
                                          options.mode));
  auto start = std::chrono::steady_clock::now();
  absl::Status status = trainer.Fit(sweep_inputs);
  if (status.ok()) recorder->Finish(trainer);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  snapshot.Restore(module);
  // The sweep's batches are not the first epoch's: its training metrics start over.
  KILN_RETURN_IF_ERROR(inputs.task->TrainingEpochEnd({}).status());
  KILN_RETURN_IF_ERROR(status);

  if (!result.losses.empty() && !std::isfinite(result.losses[0])) {
    return absl::FailedPreconditionError(
        absl::StrFormat("kiln tune lr_find: the loss is %g at the first step (lr %g), before the "
                        "learning rate could matter: "
                        "check the model, the data and trainer.precision",
                        result.losses[0], result.lrs[0]));
  }
  result.suggestion = SteepestDescent(result.lrs, result.smoothed, options.skip_begin,
                                      options.skip_end, options.mode == "exponential");
  Logger::Instance().Info(absl::StrFormat(
      "lr_find: %d steps in %.1f s%s", result.lrs.size(), result.seconds,
      result.stopped_early.empty() ? "" : "; stopped early: " + result.stopped_early));
  return result;
}

absl::Status WriteLrFindCsv(const std::string& dir, const LrFindResult& result) {
  std::string csv = "lr,loss,smoothed_loss\n";
  for (size_t i = 0; i < result.lrs.size(); ++i) {
    absl::StrAppend(&csv, config::PythonFloatRepr(result.lrs[i]), ",",
                    config::PythonFloatRepr(result.losses[i]), ",",
                    config::PythonFloatRepr(result.smoothed[i]), "\n");
  }
  return WriteFileAtomically(dir + "/lr_find.csv", csv);
}

}  // namespace kiln
