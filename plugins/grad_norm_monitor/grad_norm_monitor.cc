// A kiln plugin that adds a callback: before every optimizer step it measures the global L2
// norm of the gradients; every `every_n_steps` steps it records (step, norm) and at the end of
// fit writes them to a CSV file and logs the largest and the mean.
//   kiln train --plugin PATH/libgrad_norm_monitor.so callbacks=grad_norm
#include <kiln/core.h>
#include <kiln/logging.h>
#include <kiln/plugin.h>
#include <kiln/registry.h>
#include <kiln/trainer.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "absl/strings/str_format.h"

namespace {

class GradNormMonitor : public kiln::Callback {
 public:
  GradNormMonitor(std::string filename, int64_t every_n_steps)
      : filename_(std::move(filename)), every_n_steps_(every_n_steps) {}

  absl::Status OnBeforeOptimizerStep(kiln::Trainer& trainer) override {
    // global_step() counts the steps already taken: this one is global_step() + 1.
    int64_t step = trainer.global_step() + 1;
    if (step % every_n_steps_ != 0) return absl::OkStatus();
    double sum_sq = 0;
    for (const auto& p : trainer.task()->module().parameters()) {
      if (p.grad().defined())
        sum_sq += p.grad().detach().to(torch::kDouble).pow(2).sum().item<double>();
    }
    rows_.push_back({step, std::sqrt(sum_sq)});
    return absl::OkStatus();
  }

  absl::Status OnFitEnd(kiln::Trainer&) override {
    std::string csv = "step,grad_norm\n";
    double max = 0, sum = 0;
    for (const auto& [step, norm] : rows_) {
      absl::StrAppendFormat(&csv, "%d,%.6g\n", step, norm);
      max = std::max(max, norm);
      sum += norm;
    }
    if (auto status = kiln::WriteFileAtomically(filename_, csv); !status.ok()) return status;
    if (!rows_.empty()) {
      kiln::Logger::Instance().Info(
          absl::StrFormat("gradient norm over %d steps: max %.4g, mean %.4g (%s)", rows_.size(),
                          max, sum / rows_.size(), filename_));
    }
    return absl::OkStatus();
  }

 private:
  std::string filename_;
  int64_t every_n_steps_;
  std::vector<std::pair<int64_t, double>> rows_;
};

struct GradNormMonitorOptions {
  std::string filename;
  int64_t every_n_steps = 1;
};

void Register(kiln::Registrar& registrar) {
  using O = GradNormMonitorOptions;
  registrar.Add<kiln::Callback>(
      "grad_norm_monitor",
      "Records the global gradient norm before optimizer steps (plugin example)",
      kiln::OptionBinding<O>()
          .Required("filename", &O::filename, "CSV file written at the end of fit",
                    kiln::NonEmpty())
          .Field("every_n_steps", &O::every_n_steps, "record every n-th optimizer step",
                 kiln::AtLeast(1)),
      [](const O& o) -> absl::StatusOr<std::shared_ptr<kiln::Callback>> {
        return std::make_shared<GradNormMonitor>(o.filename, o.every_n_steps);
      });
}

}  // namespace

KILN_PLUGIN("grad_norm_monitor", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
