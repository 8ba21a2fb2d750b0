// The learning-rate finder (Lightning's Tuner.lr_find, `kiln tune lr_find`): a short fit whose
// learning rate grows from min_lr to max_lr, one value per optimizer step, recording the loss;
// it stops early when the smoothed loss diverges and suggests the lr where the smoothed loss
// falls fastest. The model is put back as it was afterwards, so training can follow.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/registry/options.h"
#include "lib/trainer/trainer.h"

namespace kiln {

// `tuner.lr_find` in configs/tune.yaml, declared once here.
struct LrFindOptions {
  double min_lr = 1e-8;
  double max_lr = 1.0;
  int64_t num_training = 100;  // optimizer steps
  std::string mode = "exponential";
  std::optional<double> early_stop_threshold = 4.0;  // null: never stop early
  int64_t skip_begin = 10;
  int64_t skip_end = 1;
  bool apply = false;  // then train with the suggestion as optimizer.lr

  static const OptionBinding<LrFindOptions>& Binding();
  // Checks `tuner.lr_find` of the job config (unknown keys, types, min_lr < max_lr, enough steps
  // for a suggestion) and fills the struct.
  static absl::StatusOr<LrFindOptions> FromConfig(const config::Config& job);
};

// The smoothing of the recorded loss: an exponential moving average with this beta, divided by
// 1 - beta^n after n points (bias correction), as Lightning's and fastai's finders.
inline constexpr double kLrFindBeta = 0.98;

struct LrFindResult {
  std::vector<double> lrs;       // the lr of each optimizer step (the first parameter group's)
  std::vector<double> losses;    // the step's loss (the mean over its accumulated micro-batches)
  std::vector<double> smoothed;  // the smoothed loss after the step
  std::optional<size_t> suggestion;  // an index into the vectors
  std::string stopped_early;         // why the sweep ended before num_training steps ("" if not)
  double seconds = 0;
};

// The lr of step `step` of `options`' sweep: min_lr at step 0, max_lr at step num_training - 1,
// evenly spaced on a log scale (exponential) or a linear one.
double SweepLearningRate(const LrFindOptions& options, int64_t step);

// Lightning's suggestion: drop `skip_begin` points at the start and `skip_end` at the end, and the
// non-finite ones; the index (into `smoothed`) of the most negative gradient of the smoothed loss
// along the plot's x axis: torch.gradient with log(lr) as coordinates (`log_scale`, an
// exponential sweep) or the lr (linear). Lightning >= 2.5.4 takes the gradient against the lr in
// both modes, which in an exponential sweep divides the flat start's noise by tiny lr steps (on
// experiment=fashion_mnist it suggests 1.1e-7); against log(lr) it is Lightning's earlier rule
// (the gradient per step). Nullopt with fewer than 2 points left.
std::optional<size_t> SteepestDescent(const std::vector<double>& lrs,
                                      const std::vector<double>& smoothed, int64_t skip_begin,
                                      int64_t skip_end, bool log_scale);

// Runs the sweep as a fit of its own through the trainer's loops (the task's training step,
// gradient accumulation, clipping and precision of `trainer_options`; none of the job's
// callbacks, loggers or scheduler; no checkpoints, no validation), then restores every
// parameter and buffer of the task's model bitwise and clears the task's training metrics, so
// a fit that follows starts exactly as it would have without the sweep. A non-finite loss at
// the first step is an error; a sweep that diverged too early for a suggestion returns its
// points without one.
absl::StatusOr<LrFindResult> FindLearningRate(const TrainerOptions& trainer_options,
                                              const FitInputs& inputs,
                                              const LrFindOptions& options);

// lr_find.csv (lr, loss, smoothed_loss; every digit that reads back) in `dir`.
absl::Status WriteLrFindCsv(const std::string& dir, const LrFindResult& result);

}  // namespace kiln
