// weight_averaging: an averaged copy of the model that validation, test, export and predict use
// (Lightning's WeightAveraging / StochasticWeightAveraging, timm's ModelEmaV2).
//   ema: after every optimizer step, avg = d * avg + (1 - d) * model over every floating-point
//        parameter and buffer (BatchNorm running statistics too, as timm's ModelEmaV2), with
//        d = min(decay, (1 + n) / (10 + n)) after n updates when `warmup` (the ramp of
//        TensorFlow's ExponentialMovingAverage(num_updates) and diffusers' EMAModel), so early
//        averages are not dominated by the random initialization.
//   swa: from epoch `swa_epoch_start`, the equal-weight mean of the weights at the end of each
//        epoch (torch.optim.swa_utils.AveragedModel); the lr anneals from the schedule's to
//        `swa_lrs` over `annealing_epochs` (torch's SWALR; the scheduler stops); at the end of fit
//        one pass over the training data recomputes the BatchNorm statistics of the averaged
//        weights (`update_bn`, torch.optim.swa_utils.update_bn).
// With `evaluate_averaged` (default), validation swaps the averaged weights in and back out, a
// checkpoint's model is the averaged weights (the training weights and the update counter go in
// this callback's state, so a resume continues bitwise), and at the end of fit the model keeps the
// averaged weights, so the test after fit uses them. Integer buffers (num_batches_tracked) follow
// the model.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"
#include "lib/weights/checkpoint.h"

namespace kiln {
namespace {

struct WeightAveragingOptions {
  std::string mode = "ema";
  double decay = 0.999;
  bool warmup = true;
  std::optional<int64_t> swa_epoch_start;
  std::optional<double> swa_lrs;
  int64_t annealing_epochs = 10;
  std::string annealing_strategy = "cos";
  bool update_bn = true;
  bool evaluate_averaged = true;
};

// Calls fn(momentum option) for a BatchNorm of any dimension; false when `m` is none.
template <typename Fn>
bool WithBatchNormMomentum(torch::nn::Module& m, Fn fn) {
  if (auto* bn = dynamic_cast<torch::nn::BatchNorm1dImpl*>(&m))
    return fn(bn->options.momentum(), *bn), true;
  if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m))
    return fn(bn->options.momentum(), *bn), true;
  if (auto* bn = dynamic_cast<torch::nn::BatchNorm3dImpl*>(&m))
    return fn(bn->options.momentum(), *bn), true;
  return false;
}

class WeightAveraging : public Callback {
 public:
  WeightAveraging(WeightAveragingOptions o, std::string key)
      : o_(std::move(o)), key_(std::move(key)) {}

  std::string state_key() const override {
    return absl::StrCat("WeightAveraging{mode=", o_.mode, "}");
  }

  absl::Status OnFitStart(Trainer& trainer) override {
    bool swa = o_.mode == "swa";
    if (swa) {
      int64_t max_epochs = trainer.options().max_epochs;
      swa_start_ = o_.swa_epoch_start.value_or(static_cast<int64_t>(std::floor(0.8 * max_epochs)));
      if (swa_start_ >= max_epochs) {
        return absl::InvalidArgumentError(absl::StrCat(
            key_, ".swa_epoch_start: ", swa_start_,
            " is not before trainer.max_epochs=", max_epochs, "; SWA would average nothing"));
      }
    }
    names_.clear();
    model_.clear();
    averaged_.clear();
    floating_.clear();
    avg_float_.clear();
    model_float_.clear();
    torch::nn::Module& module = trainer.task()->module();
    auto add = [&](const std::string& name, const torch::Tensor& t, bool averaged) {
      names_.push_back(name);
      model_.push_back(t);
      floating_.push_back(averaged && t.is_floating_point());
    };
    for (const auto& p : module.named_parameters()) add(p.key(), p.value(), true);
    // EMA averages the BatchNorm statistics too; SWA recomputes them (update_bn).
    for (const auto& b : module.named_buffers()) add(b.key(), b.value(), !swa);
    torch::NoGradGuard no_grad;
    for (const auto& t : model_) averaged_.push_back(t.detach().clone());
    for (size_t i = 0; i < model_.size(); ++i) {
      if (floating_[i]) {
        avg_float_.push_back(averaged_[i]);
        model_float_.push_back(model_[i].detach());
      }
    }
    updates_ = 0;
    return absl::OkStatus();
  }

  absl::Status OnTrainEpochStart(Trainer& trainer) override {
    if (o_.mode != "swa" || trainer.current_epoch() < swa_start_) return absl::OkStatus();
    trainer.PauseScheduler(true);
    if (!o_.swa_lrs.has_value()) return absl::OkStatus();
    auto& groups = trainer.optimizer()->param_groups();
    // The schedule's lrs when SWA started, for every group (a resumed fit restored them).
    while (start_lrs_.size() < groups.size())
      start_lrs_.push_back(groups[start_lrs_.size()].options().get_lr());
    double t = std::min(1.0, static_cast<double>(trainer.current_epoch() - swa_start_) /
                                 static_cast<double>(std::max<int64_t>(1, o_.annealing_epochs)));
    double alpha = o_.annealing_strategy == "cos" ? (1 - std::cos(M_PI * t)) / 2 : t;
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].options().set_lr(*o_.swa_lrs * alpha + start_lrs_[g] * (1 - alpha));
    }
    return absl::OkStatus();
  }

  absl::Status OnTrainBatchEnd(Trainer& trainer, const data::Batch&, double) override {
    // Once per optimizer step, not per accumulated micro-batch.
    if (o_.mode != "ema" || trainer.global_step() == last_step_) return absl::OkStatus();
    last_step_ = trainer.global_step();
    double d = o_.decay;
    if (o_.warmup) d = std::min(d, (1.0 + updates_) / (10.0 + updates_));
    torch::NoGradGuard no_grad;
    torch::_foreach_mul_(avg_float_, d);
    torch::_foreach_add_(avg_float_, model_float_, 1.0 - d);
    CopyIntegerBuffers();
    ++updates_;
    return absl::OkStatus();
  }

  absl::Status OnTrainEpochEnd(Trainer& trainer) override {
    // current_epoch() has moved on: the epoch that ended is current_epoch() - 1.
    if (o_.mode != "swa" || trainer.current_epoch() - 1 < swa_start_) return absl::OkStatus();
    torch::NoGradGuard no_grad;
    double n = static_cast<double>(updates_);
    torch::_foreach_mul_(avg_float_, n / (n + 1));
    torch::_foreach_add_(avg_float_, model_float_, 1.0 / (n + 1));
    CopyIntegerBuffers();
    for (size_t i = 0; i < model_.size(); ++i) {
      if (!floating_[i])
        averaged_[i].copy_(model_[i]);  // SWA: buffers as the model's until update_bn
    }
    ++updates_;
    return absl::OkStatus();
  }

  absl::Status OnValidationStart(Trainer&) override {
    if (!o_.evaluate_averaged || updates_ == 0) return absl::OkStatus();
    SwapInAveraged();
    return absl::OkStatus();
  }

  absl::Status OnValidationEnd(Trainer&, const std::map<std::string, double>&) override {
    if (stash_.empty()) return absl::OkStatus();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model_.size(); ++i) model_[i].detach().copy_(stash_[i]);
    stash_.clear();
    return absl::OkStatus();
  }

  absl::Status OnFitEnd(Trainer& trainer) override {
    if (!o_.evaluate_averaged || updates_ == 0) return absl::OkStatus();
    // The model keeps the averaged weights; a checkpoint written from now on still holds the
    // training weights in this callback's state.
    SwapInAveraged();
    if (o_.mode == "swa" && o_.update_bn) KILN_RETURN_IF_ERROR(UpdateBatchNorm(trainer));
    Logger::Instance().Info(absl::StrCat("weight_averaging: the model now holds the ", o_.mode,
                                         " weights (", updates_, " updates)"));
    ended_ = true;
    return absl::OkStatus();
  }

  std::map<std::string, torch::Tensor> CheckpointModelState() const override {
    if (!o_.evaluate_averaged || updates_ == 0 || averaged_.empty()) return {};
    std::map<std::string, torch::Tensor> state;
    for (size_t i = 0; i < names_.size(); ++i) state[names_[i]] = averaged_[i];
    return state;
  }

  void SaveState(torch::serialize::OutputArchive& archive) const override {
    archive.write("updates", torch::tensor(updates_, torch::kInt64));
    archive.write("last_step", torch::tensor(last_step_, torch::kInt64));
    archive.write("start_lrs", torch::tensor(start_lrs_, torch::kFloat64));
    if (averaged_.empty()) return;
    // Whichever of the two weight sets the checkpoint's model does not hold.
    bool model_is_averaged = !CheckpointModelState().empty();
    const std::vector<torch::Tensor>& training = ended_ ? stash_ : model_;
    std::map<std::string, torch::Tensor> other;
    for (size_t i = 0; i < names_.size(); ++i)
      other[names_[i]] = model_is_averaged ? training[i] : averaged_[i];
    torch::serialize::OutputArchive weights;
    WriteModelState(other, weights);
    archive.write(model_is_averaged ? "training" : "averaged", weights);
  }

  void LoadState(torch::serialize::InputArchive& archive) override {
    // A fresh tensor for each read: try_read set_()s a defined one to the stored data.
    torch::Tensor updates, last_step, start_lrs;
    restored_ = {};
    if (archive.try_read("updates", updates)) restored_.updates = updates.item<int64_t>();
    if (archive.try_read("last_step", last_step)) restored_.last_step = last_step.item<int64_t>();
    if (archive.try_read("start_lrs", start_lrs)) {
      start_lrs = start_lrs.to(torch::kFloat64).contiguous();
      restored_.start_lrs.assign(start_lrs.data_ptr<double>(),
                                 start_lrs.data_ptr<double>() + start_lrs.numel());
    }
    torch::serialize::InputArchive weights;
    for (const char* which : {"training", "averaged"}) {
      if (archive.try_read(which, weights)) {
        auto state = ReadModelState(weights, which);
        if (state.ok()) {
          restored_.weights = *std::move(state);
          restored_.model_is_averaged = std::string(which) == "training";
        }
        break;
      }
    }
    restored_.present = true;
  }

  // The checkpoint's model was loaded into the module before this runs.
  absl::Status OnLoadCheckpoint(Trainer&) override {
    if (!restored_.present) return absl::OkStatus();
    updates_ = restored_.updates;
    last_step_ = restored_.last_step;
    start_lrs_ = restored_.start_lrs;
    if (restored_.weights.empty()) return absl::OkStatus();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < names_.size(); ++i) {
      auto it = restored_.weights.find(names_[i]);
      if (it == restored_.weights.end() || !it->second.sizes().equals(model_[i].sizes())) {
        return absl::InvalidArgumentError(
            absl::StrCat(key_, ": the checkpoint's weight_averaging state has no '", names_[i],
                         "' of shape ", c10::str(model_[i].sizes())));
      }
      if (restored_.model_is_averaged) {
        averaged_[i].copy_(model_[i]);
        model_[i].detach().copy_(it->second);
      } else {
        averaged_[i].copy_(it->second);
      }
    }
    restored_ = {};
    return absl::OkStatus();
  }

 private:
  // The training weights go to stash_, the averaged ones into the model.
  void SwapInAveraged() {
    torch::NoGradGuard no_grad;
    stash_.clear();
    for (size_t i = 0; i < model_.size(); ++i) {
      stash_.push_back(model_[i].detach().clone());
      model_[i].detach().copy_(averaged_[i]);
    }
  }

  void CopyIntegerBuffers() {
    for (size_t i = 0; i < model_.size(); ++i) {
      if (!model_[i].is_floating_point()) averaged_[i].copy_(model_[i]);
    }
  }

  // torch.optim.swa_utils.update_bn: running statistics reset, then a cumulative average
  // (momentum None) over one pass of the training data in train mode.
  absl::Status UpdateBatchNorm(Trainer& trainer) {
    torch::nn::Module& module = trainer.task()->module();
    std::vector<std::pair<torch::nn::Module*, c10::optional<double>>> norms;
    for (const auto& m : module.modules(/*include_self=*/true)) {
      WithBatchNormMomentum(*m, [&](auto& momentum, auto& bn) {
        norms.emplace_back(m.get(), momentum);
        bn.reset_running_stats();
        momentum = c10::nullopt;
      });
    }
    if (norms.empty()) return absl::OkStatus();
    bool was_training = module.is_training();
    module.train();
    Task& task = *trainer.task();
    absl::Status status = trainer.ForEachTrainingBatch(
        [&](data::Batch& batch) -> absl::Status { return task.PredictStep(batch).status(); });
    for (auto& norm : norms) {
      WithBatchNormMomentum(*norm.first, [&](auto& option, auto&) { option = norm.second; });
    }
    module.train(was_training);
    KILN_RETURN_IF_ERROR(status);
    for (size_t i = 0; i < model_.size(); ++i) {
      if (!floating_[i]) averaged_[i].copy_(model_[i]);  // the recomputed statistics
    }
    Logger::Instance().Info(absl::StrCat("weight_averaging: update_bn recomputed ", norms.size(),
                                         " BatchNorm layers' statistics over the training data"));
    return absl::OkStatus();
  }

  struct Restored {
    bool present = false;
    int64_t updates = 0, last_step = 0;
    std::vector<double> start_lrs;
    std::map<std::string, torch::Tensor> weights;
    bool model_is_averaged = false;
  };

  WeightAveragingOptions o_;
  std::string key_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> model_,
      averaged_;                // every parameter and buffer, in the module's order
  std::vector<bool> floating_;  // averaged (the rest is copied)
  std::vector<torch::Tensor> avg_float_, model_float_;
  std::vector<torch::Tensor> stash_;  // the training weights while the averaged ones are in
  std::vector<double> start_lrs_;
  int64_t updates_ = 0, last_step_ = 0, swa_start_ = 0;
  bool ended_ = false;
  Restored restored_;
};

using O = WeightAveragingOptions;
KILN_REGISTER_BOUND(
    Callback, "weight_averaging",
    "An EMA or SWA average of the weights, used for validation, test, export and predict "
    "(Lightning's WeightAveraging and StochasticWeightAveraging, timm's ModelEmaV2)",
    OptionBinding<O>()
        .Field("mode", &O::mode, "ema (after every optimizer step) or swa (mean of epoch ends)",
               OneOf({"ema", "swa"}))
        .Field("decay", &O::decay, "ema: the average keeps this share at each step", InRange(0, 1))
        .Field("warmup", &O::warmup, "ema: decay = min(decay, (1+n)/(10+n)) after n updates")
        .Field("swa_epoch_start", &O::swa_epoch_start,
               "swa: the first epoch averaged (null: 80% of max_epochs, as Lightning's 0.8)",
               AtLeast(0))
        .Field(
            "swa_lrs", &O::swa_lrs,
            "swa: the lr annealed to from swa_epoch_start (null: the lr at swa_epoch_start, held)",
            GreaterThan(0))
        .Field("annealing_epochs", &O::annealing_epochs, "swa: epochs to anneal the lr to swa_lrs",
               AtLeast(0))
        .Field("annealing_strategy", &O::annealing_strategy, "swa: cos or linear",
               OneOf({"cos", "linear"}))
        .Field(
            "update_bn", &O::update_bn,
            "swa: recompute BatchNorm statistics with one pass over the training data at the end")
        .Field("evaluate_averaged", &O::evaluate_averaged,
               "validation, checkpoints' model (test, export, predict) and the model after fit use "
               "the averaged "
               "weights"),
    [](const O& o, const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Callback>> {
      std::string key = context.FullKey("mode");
      key = key.substr(0, key.rfind('.'));
      return std::make_shared<WeightAveraging>(o, key);
    });

}  // namespace
}  // namespace kiln
