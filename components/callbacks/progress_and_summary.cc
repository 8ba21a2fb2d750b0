// progress_bar: live progress with rate and ETA on a terminal, plain periodic lines otherwise.
// model_summary: the model's parameter table when training starts.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "lib/distributed/sharding_units.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

class ProgressBar : public Callback {
 public:
  explicit ProgressBar(int64_t refresh_rate) : refresh_rate_(refresh_rate), tty_(::isatty(2)) {}

  absl::Status OnTrainEpochStart(Trainer&) override {
    first_batch_ = -1;
    return absl::OkStatus();
  }

  absl::Status OnTrainBatchEnd(Trainer& trainer, const data::Batch& batch, double loss) override {
    if (!trainer.options().enable_progress_bar || !trainer.is_global_zero())
      return absl::OkStatus();
    // The rate counts from the first batch this process saw, which is not 0 in a resumed epoch.
    if (first_batch_ < 0) {
      first_batch_ = batch.index;
      start_ = std::chrono::steady_clock::now();
    }
    int64_t done = batch.index + 1, total = trainer.train_batches_per_epoch();
    bool last = done == total;
    if (!last && done % refresh_rate_ != 0) return absl::OkStatus();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double rate = seconds > 0 ? static_cast<double>(done - first_batch_ - 1) / seconds : 0;
    double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    std::string line = absl::StrFormat("epoch %d  %d/%d  loss %.4f  %.1f it/s  eta %.0fs",
                                       trainer.current_epoch(), done, total, loss, rate, eta);
    if (tty_) {
      std::fprintf(stderr, "\r%-79s%s", line.c_str(), last ? "\n" : "");
      std::fflush(stderr);
    } else {
      Logger::Instance().Info(line);
    }
    return absl::OkStatus();
  }

 private:
  int64_t refresh_rate_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  int64_t first_batch_ = -1;
};

class ModelSummary : public Callback {
 public:
  absl::Status OnFitStart(Trainer& trainer) override {
    int64_t total = 0, trainable = 0;
    std::string table;
    for (const auto& p : trainer.task()->module().named_parameters()) {
      // A parameter built as this worker's piece (fsdp) counts as the whole it is a piece of.
      std::vector<int64_t> shape = p.value().sizes().vec();
      if (auto piece = distributed::BuiltPieceOf(p.value())) shape = piece->shape;
      const int64_t numel = c10::multiply_integers(shape);
      total += numel;
      if (p.value().requires_grad()) trainable += numel;
      table +=
          absl::StrFormat("  %-40s %-20s %d\n", p.key(), c10::str(c10::IntArrayRef(shape)), numel);
    }
    Logger::Instance().Info(
        absl::StrFormat("model: %d parameters (%d trainable)\n%s", total, trainable, table));
    return absl::OkStatus();
  }
};

struct ProgressBarOptions {
  int64_t refresh_rate = 50;
};

KILN_REGISTER_BOUND(Callback, "progress_bar",
                    "Progress with rate and ETA (live on a terminal, lines otherwise)",
                    OptionBinding<ProgressBarOptions>().Field("refresh_rate",
                                                              &ProgressBarOptions::refresh_rate,
                                                              "update every N batches"),
                    [](const ProgressBarOptions& o) -> absl::StatusOr<std::shared_ptr<Callback>> {
                      return std::make_shared<ProgressBar>(std::max<int64_t>(1, o.refresh_rate));
                    });

KILN_REGISTER_BOUND(Callback, "model_summary", "Prints the model's parameters when training starts",
                    OptionBinding<NoOptions>(),
                    [](const NoOptions&) -> absl::StatusOr<std::shared_ptr<Callback>> {
                      return std::make_shared<ModelSummary>();
                    });

}  // namespace
}  // namespace kiln
