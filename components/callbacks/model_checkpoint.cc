// ModelCheckpoint (Lightning's): after each epoch, keeps the best `save_top_k` checkpoints by a
// monitored metric and, with save_last, `last.ckpt` to resume from. Filenames come from a
// template like "epoch={epoch}-val_acc={val/acc:.4f}". Runs after every other callback.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

struct ModelCheckpointOptions {
  std::string dirpath;  // empty: the run's, trainer.default_root_dir/checkpoints
  std::string filename = "epoch={epoch}";
  std::string monitor;
  std::string mode = "min";
  int64_t save_top_k = 1;
  bool save_last = true;
  int64_t every_n_epochs = 1;
  int64_t every_n_train_steps = 0;
};

class ModelCheckpoint : public Callback, public CheckpointKeeper {
 public:
  explicit ModelCheckpoint(const ModelCheckpointOptions& o)
      // Without a monitor the score is the step, and the latest checkpoint is the best.
      : dirpath_(o.dirpath),
        filename_(o.filename),
        monitor_(o.monitor),
        maximize_(o.monitor.empty() || o.mode == "max"),
        save_top_k_(o.save_top_k),
        save_last_(o.save_last),
        every_n_epochs_(o.every_n_epochs),
        every_n_train_steps_(o.every_n_train_steps) {}

  bool runs_last() const override { return true; }
  // As Lightning's: two checkpoint callbacks differ by what they monitor and when they save.
  std::string state_key() const override {
    return absl::StrCat("ModelCheckpoint{monitor=", monitor_, ",mode=", maximize_ ? "max" : "min",
                        ",every_n_epochs=", every_n_epochs_,
                        ",every_n_train_steps=", every_n_train_steps_, "}");
  }

  const std::string& checkpoint_dir() const override { return dirpath_; }
  void UseRunCheckpointDir(const std::string& dir) override {
    if (dirpath_.empty()) dirpath_ = dir;
  }
  std::string best_model_path() const override {
    if (!best_path_.empty()) return best_path_;
    std::ifstream in(dirpath_ + "/best_model_path.txt");
    std::string path;
    if (in) std::getline(in, path);
    return path;
  }

  absl::Status OnFitStart(Trainer& trainer) override {
    UseRunCheckpointDir(trainer.options().default_root_dir + "/checkpoints");
    trainer.set_checkpoint_dir(dirpath_);
    return absl::OkStatus();
  }

  absl::Status OnTrainBatchEnd(Trainer& trainer, const data::Batch&, double) override {
    if (every_n_train_steps_ <= 0 || !trainer.checkpointing_enabled()) return absl::OkStatus();
    if (trainer.global_step() == 0 || trainer.global_step() % every_n_train_steps_ != 0 ||
        trainer.global_step() == last_step_saved_) {
      return absl::OkStatus();
    }
    last_step_saved_ = trainer.global_step();
    return Save(trainer);
  }

  absl::Status OnTrainEpochEnd(Trainer& trainer) override {
    if (!trainer.checkpointing_enabled() || every_n_train_steps_ > 0) return absl::OkStatus();
    if (every_n_epochs_ <= 0 || trainer.current_epoch() % every_n_epochs_ != 0)
      return absl::OkStatus();
    return Save(trainer);
  }

  void SaveState(torch::serialize::OutputArchive& archive) const override {
    std::vector<double> scores;
    std::string paths;
    for (const auto& [score, path] : top_) {
      scores.push_back(score);
      paths += path + "\n";
    }
    archive.write("scores", torch::tensor(scores, torch::kFloat64));
    archive.write("paths", c10::IValue(paths));
    archive.write("best", c10::IValue(best_path_));
  }

  void LoadState(torch::serialize::InputArchive& archive) override {
    torch::Tensor scores;
    c10::IValue paths, best;
    if (!archive.try_read("scores", scores) || !archive.try_read("paths", paths)) return;
    archive.try_read("best", best);
    top_.clear();
    std::vector<std::string> lines = absl::StrSplit(paths.toStringRef(), '\n', absl::SkipEmpty());
    for (size_t i = 0; i < lines.size() && i < static_cast<size_t>(scores.numel()); ++i) {
      top_.emplace_back(scores[static_cast<int64_t>(i)].item<double>(), lines[i]);
    }
    if (best.isString()) best_path_ = best.toStringRef();
  }

 private:
  std::string FormatName(const Trainer& trainer) const {
    std::string out;
    const std::string& t = filename_;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] != '{') {
        out += t[i];
        continue;
      }
      size_t close = t.find('}', i);
      if (close == std::string::npos) {
        out += t.substr(i);
        break;
      }
      std::string field = t.substr(i + 1, close - i - 1);
      std::string spec;
      size_t colon = field.find(':');
      if (colon != std::string::npos) {
        spec = field.substr(colon + 1);
        field = field.substr(0, colon);
      }
      if (field == "epoch") {
        out += std::to_string(trainer.current_epoch() - (every_n_train_steps_ > 0 ? 0 : 1));
      } else if (field == "step") {
        out += std::to_string(trainer.global_step());
      } else {
        auto it = trainer.callback_metrics().find(field);
        double v = it == trainer.callback_metrics().end() ? std::nan("") : it->second;
        int precision = 4;
        if (spec.size() >= 3 && spec[0] == '.' && spec.back() == 'f')
          precision = std::atoi(spec.c_str() + 1);
        out += absl::StrFormat("%.*f", precision, v);
      }
      i = close;
    }
    return out;
  }

  absl::Status Save(Trainer& trainer) {
    // Every rank keeps the same bookkeeping (metrics are reduced across ranks); rank 0 writes.
    const bool writes = trainer.is_global_zero();
    if (writes) {
      if (absl::Status made = MakeDirs(dirpath_); !made.ok())
        return trainer.CheckpointWriteFailed(dirpath_, made);
    }
    if (save_top_k_ != 0) {
      auto it = trainer.callback_metrics().find(monitor_);
      bool has_metric = !monitor_.empty() && it != trainer.callback_metrics().end();
      if (!monitor_.empty() && !has_metric) {
        // As Lightning: a checkpoint every N steps before the first validation has no score yet
        // (it goes to last.ckpt only, with one warning); a metric still missing after one is a
        // mistake.
        const auto& metrics = trainer.callback_metrics();
        const bool validated = std::any_of(metrics.begin(), metrics.end(), [](const auto& m) {
          return absl::StartsWith(m.first, "val/");
        });
        if (every_n_train_steps_ <= 0 || validated) {
          return absl::InvalidArgumentError(absl::StrCat("callbacks.model_checkpoint.monitor='",
                                                         monitor_, "' is not a logged metric"));
        }
        if (!warned_unscored_) {
          warned_unscored_ = true;
          Logger::Instance().Warning(
              absl::StrCat("model_checkpoint: ", monitor_,
                           " is not logged before the first validation; the checkpoints every ",
                           every_n_train_steps_, " steps until then go to last.ckpt only"));
        }
        if (save_last_ && trainer.checkpointing_enabled())
          KILN_RETURN_IF_ERROR(trainer.SaveCheckpoint(dirpath_ + "/last.ckpt"));
        return absl::OkStatus();
      }
      double score = has_metric ? it->second : static_cast<double>(trainer.global_step());
      bool better_than_worst = static_cast<int64_t>(top_.size()) < save_top_k_ || save_top_k_ < 0 ||
                               (maximize_ ? score > top_.back().first : score < top_.back().first);
      if (better_than_worst && std::isfinite(score)) {
        std::string path = absl::StrCat(dirpath_, "/", FormatName(trainer), ".ckpt");
        KILN_RETURN_IF_ERROR(trainer.SaveCheckpoint(path));
        // trainer.on_save_error=continue after a failed write: the files kept so far stay as they
        // are.
        if (!trainer.checkpointing_enabled()) return absl::OkStatus();
        top_.erase(std::remove_if(top_.begin(), top_.end(),
                                  [&](const auto& e) { return e.second == path; }),
                   top_.end());
        top_.emplace_back(score, path);
        std::stable_sort(top_.begin(), top_.end(), [&](const auto& a, const auto& b) {
          return maximize_ ? a.first > b.first : a.first < b.first;
        });
        while (save_top_k_ > 0 && static_cast<int64_t>(top_.size()) > save_top_k_) {
          if (writes) {
            // A file, or a folder of pieces (trainer.strategy=fsdp).
            std::error_code ignored;
            std::filesystem::remove_all(top_.back().second, ignored);
          }
          top_.pop_back();
        }
        if (best_path_ != top_.front().second) {
          best_path_ = top_.front().second;
          std::string record = dirpath_ + "/best_model_path.txt";
          if (absl::Status written =
                  writes ? WriteFileAtomically(record, best_path_ + "\n") : absl::OkStatus();
              !written.ok()) {
            KILN_RETURN_IF_ERROR(trainer.CheckpointWriteFailed(record, written));
            return absl::OkStatus();
          }
          Logger::Instance().Info(
              monitor_.empty() ? absl::StrCat("newest checkpoint (step ", score, "): ", best_path_)
                               : absl::StrCat("new best ", monitor_, "=", score, ": ", best_path_));
        }
      }
    }
    if (save_last_ && trainer.checkpointing_enabled())
      KILN_RETURN_IF_ERROR(trainer.SaveCheckpoint(dirpath_ + "/last.ckpt"));
    return absl::OkStatus();
  }

  std::string dirpath_, filename_, monitor_;
  bool maximize_;
  int64_t save_top_k_;
  bool save_last_;
  int64_t every_n_epochs_, every_n_train_steps_;
  int64_t last_step_saved_ = -1;
  bool warned_unscored_ = false;
  std::vector<std::pair<double, std::string>> top_;  // best first
  std::string best_path_;
};

KILN_REGISTER_BOUND(
    Callback, "model_checkpoint", "Keeps the best checkpoints by a metric, and last.ckpt",
    OptionBinding<ModelCheckpointOptions>()
        .Field("dirpath", &ModelCheckpointOptions::dirpath,
               "folder for the checkpoint files (default: trainer.default_root_dir/checkpoints, "
               "the run's)",
               NonEmpty())
        .Field("filename", &ModelCheckpointOptions::filename,
               "name template: {epoch}, {step}, {metric:.4f}", NonEmpty())
        .Field("monitor", &ModelCheckpointOptions::monitor,
               "metric to rank checkpoints by (empty: the latest wins, and save_top_k keeps the "
               "latest k)")
        .Field("mode", &ModelCheckpointOptions::mode,
               "min or max: which direction of the metric is better", OneOf({"min", "max"}))
        .Field("save_top_k", &ModelCheckpointOptions::save_top_k,
               "how many best checkpoints to keep (-1: all, 0: none)", AtLeast(-1))
        .Field("save_last", &ModelCheckpointOptions::save_last,
               "also write last.ckpt every time, to resume from")
        .Field("every_n_epochs", &ModelCheckpointOptions::every_n_epochs,
               "save after every N epochs", AtLeast(0))
        .Field("every_n_train_steps", &ModelCheckpointOptions::every_n_train_steps,
               "save every N optimizer steps instead (0: off); before the first validation a "
               "monitored metric has no value and those go to last.ckpt only",
               AtLeast(0)),
    [](const ModelCheckpointOptions& o) -> absl::StatusOr<std::shared_ptr<Callback>> {
      return std::make_shared<ModelCheckpoint>(o);
    });

}  // namespace
}  // namespace kiln
