// lr_monitor (Lightning's LearningRateMonitor): logs the learning rate of every parameter group,
// after each optimizer step or at the end of each epoch, as lr-OPTIMIZER (one group) or
// lr-OPTIMIZER/pgN (several).
#include "absl/strings/str_cat.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

// Lightning's key uses the optimizer's class name.
std::string OptimizerName(torch::optim::Optimizer* optimizer) {
  if (dynamic_cast<torch::optim::AdamW*>(optimizer)) return "AdamW";
  if (dynamic_cast<torch::optim::Adam*>(optimizer)) return "Adam";
  if (dynamic_cast<torch::optim::SGD*>(optimizer)) return "SGD";
  if (dynamic_cast<torch::optim::RMSprop*>(optimizer)) return "RMSprop";
  if (dynamic_cast<torch::optim::Adagrad*>(optimizer)) return "Adagrad";
  return "optimizer";
}

class LearningRateMonitor : public Callback {
 public:
  LearningRateMonitor(bool every_step, std::string name)
      : every_step_(every_step), name_(std::move(name)) {}

  absl::Status OnTrainBatchEnd(Trainer& trainer, const data::Batch&, double) override {
    // Logged once per optimizer step, not per accumulated micro-batch.
    if (every_step_ && trainer.global_step() != last_logged_step_) Log(trainer);
    return absl::OkStatus();
  }

  absl::Status OnTrainEpochEnd(Trainer& trainer) override {
    if (!every_step_) Log(trainer);
    return absl::OkStatus();
  }

 private:
  void Log(Trainer& trainer) {
    torch::optim::Optimizer* optimizer = trainer.optimizer();
    if (optimizer == nullptr) return;
    last_logged_step_ = trainer.global_step();
    const auto& groups = optimizer->param_groups();
    std::string name = name_.empty() ? OptimizerName(optimizer) : name_;
    std::map<std::string, double> metrics;
    for (size_t i = 0; i < groups.size(); ++i) {
      std::string key =
          groups.size() == 1 ? absl::StrCat("lr-", name) : absl::StrCat("lr-", name, "/pg", i);
      metrics[key] = groups[i].options().get_lr();
    }
    trainer.LogMetrics(metrics);
  }

  bool every_step_;
  std::string name_;
  int64_t last_logged_step_ = 0;
};

struct LearningRateMonitorOptions {
  std::string logging_interval = "step";
  std::optional<std::string> name;
};

KILN_REGISTER_BOUND(
    Callback, "lr_monitor", "Logs each parameter group's learning rate (lr-NAME, lr-NAME/pgN)",
    OptionBinding<LearningRateMonitorOptions>()
        .Field("logging_interval", &LearningRateMonitorOptions::logging_interval,
               "step (after every optimizer step) or epoch", OneOf({"step", "epoch"}))
        .Field("name", &LearningRateMonitorOptions::name,
               "NAME in the logged keys (null: the optimizer's class, e.g. AdamW)"),
    [](const LearningRateMonitorOptions& o) -> absl::StatusOr<std::shared_ptr<Callback>> {
      return std::make_shared<LearningRateMonitor>(o.logging_interval == "step",
                                                   o.name.value_or(""));
    });

}  // namespace
}  // namespace kiln
