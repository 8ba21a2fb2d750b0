#include "lib/trainer/trainer_options.h"

#include <cmath>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln {

int64_t BatchLimit::Of(int64_t available) const {
  if (!fraction) return std::min<int64_t>(available, static_cast<int64_t>(value));
  return static_cast<int64_t>(std::floor(static_cast<double>(available) * value));
}

const OptionSchema& TrainerOptions::Schema() {
  static const OptionSchema* schema = [] {
    auto* s = new OptionSchema();
    s->Int("max_epochs", 10, "stop after this many epochs")
        .Int("max_steps", -1, "stop after this many optimizer steps (-1: no limit)")
        .Add("max_time", OptionType::kAny, "null", "stop after this long: seconds or DD:HH:MM:SS")
        .Add("min_epochs", OptionType::kInt, "null", "train at least this many epochs (early stopping waits)")
        .Add("limit_train_batches", OptionType::kAny, "1.0", "fraction (float) or count (int) of training batches per epoch")
        .Add("limit_val_batches", OptionType::kAny, "1.0", "fraction or count of validation batches")
        .Add("limit_test_batches", OptionType::kAny, "1.0", "fraction or count of test batches")
        .Add("limit_predict_batches", OptionType::kAny, "1.0", "fraction or count of prediction batches")
        .Add("val_check_interval", OptionType::kAny, "1.0", "validate every fraction of an epoch (float) or N batches (int)")
        .Int("check_val_every_n_epoch", 1, "validate every N epochs")
        .Int("num_sanity_val_steps", 2, "validation batches run before training, to fail early")
        .Add("fast_dev_run", OptionType::kAny, "false", "true or N: run N (1) batches of each stage, then stop")
        .Int("overfit_batches", 0, "train and validate on the first N training batches")
        .Int("accumulate_grad_batches", 1, "micro-batches per optimizer step")
        .Add("gradient_clip_val", OptionType::kFloat, "null", "clip gradients (norm or value) at this")
        .String("gradient_clip_algorithm", "norm", "norm or value")
        .Add("precision", OptionType::kAny, "32", "32, or bf16-mixed (autocast to bfloat16)")
        .String("accelerator", "auto", "cpu, cuda or auto")
        .Int("devices", 1, "processes per node: N > 1 trains data-parallel in N worker processes")
        .Int("num_nodes", 1, "nodes (each runs kiln with NODE_RANK, MASTER_ADDR and MASTER_PORT set)")
        .Float("ddp_bucket_cap_mb", 25.0, "data parallel: gradient bucket size in MB (reduced as backward fills them)")
        .Float("ddp_timeout", 1800.0, "data parallel: seconds to wait for other workers before giving up")
        .String("process_group_backend", "auto", "data parallel: gloo (CPU), nccl (CUDA) or auto")
        .Bool("deterministic", false, "use deterministic algorithms only")
        .Add("num_threads", OptionType::kInt, "null", "LibTorch threads (null: every core)")
        .Int("log_every_n_steps", 50, "log training metrics every N optimizer steps")
        .Bool("enable_progress_bar", true, "show progress (live in a terminal, plain lines otherwise)")
        .String("default_root_dir", ".", "where checkpoints go when no callback says otherwise")
        .String("on_nonfinite_loss", "stop", "stop (with a message) or skip the step when the loss is NaN/Inf")
        .Bool("channels_last", false,
              "keep 4-D weights and image batches in channels-last (NHWC) memory order: faster convolutions");
    return s;
  }();
  return *schema;
}

namespace {

absl::Status Bad(const config::Config& cfg, const std::string& key, const std::string& what) {
  std::string where = cfg.WhereSet(key);
  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey(key), "' ", what,
                                                 where.empty() ? "" : " (set at " + where + ")"));
}

absl::StatusOr<BatchLimit> LimitOf(const config::Config& cfg, const std::string& key) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, cfg.Get<config::NodePtr>(key));
  BatchLimit limit;
  if (node->kind() == config::NodeKind::kInt) {
    limit.fraction = false;
    limit.value = static_cast<double>(node->as_int());
  } else if (node->kind() == config::NodeKind::kFloat) {
    limit.value = node->as_float();
    if (limit.value > 1.0) return Bad(cfg, key, "as a fraction must be at most 1.0 (use an int for a count)");
  } else {
    return Bad(cfg, key, "must be a fraction (float) or a number of batches (int)");
  }
  if (limit.value < 0) return Bad(cfg, key, "must not be negative");
  return limit;
}

absl::StatusOr<std::optional<double>> SecondsOf(const config::Config& cfg, const std::string& key) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, cfg.Get<config::NodePtr>(key));
  if (node->is_null()) return std::optional<double>();
  if (node->kind() == config::NodeKind::kInt) return std::optional<double>(static_cast<double>(node->as_int()));
  if (node->kind() == config::NodeKind::kFloat) return std::optional<double>(node->as_float());
  if (node->kind() == config::NodeKind::kString) {
    std::vector<std::string> parts = absl::StrSplit(node->as_string(), ':');
    if (parts.size() == 4) {
      double total = 0;
      const double unit[] = {86400, 3600, 60, 1};
      bool ok = true;
      for (size_t i = 0; i < 4; ++i) {
        double v = 0;
        ok = ok && absl::SimpleAtod(parts[i], &v);
        total += v * unit[i];
      }
      if (ok) return std::optional<double>(total);
    }
  }
  return Bad(cfg, key, "must be seconds or DD:HH:MM:SS");
}

}  // namespace

absl::StatusOr<TrainerOptions> TrainerOptions::FromConfig(const config::Config& trainer) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr applied, Schema().Apply(*trainer.node(), trainer.prefix(), "the trainer"));
  config::Config cfg(applied, trainer.prefix());
  TrainerOptions o;
  KILN_ASSIGN_OR_RETURN(o.max_epochs, cfg.Get<int64_t>("max_epochs"));
  KILN_ASSIGN_OR_RETURN(o.max_steps, cfg.Get<int64_t>("max_steps"));
  KILN_ASSIGN_OR_RETURN(o.max_time, SecondsOf(cfg, "max_time"));
  KILN_ASSIGN_OR_RETURN(o.min_epochs, cfg.GetOr<int64_t>("min_epochs", 0));
  KILN_ASSIGN_OR_RETURN(o.limit_train_batches, LimitOf(cfg, "limit_train_batches"));
  KILN_ASSIGN_OR_RETURN(o.limit_val_batches, LimitOf(cfg, "limit_val_batches"));
  KILN_ASSIGN_OR_RETURN(o.limit_test_batches, LimitOf(cfg, "limit_test_batches"));
  KILN_ASSIGN_OR_RETURN(o.limit_predict_batches, LimitOf(cfg, "limit_predict_batches"));
  KILN_ASSIGN_OR_RETURN(o.val_check_interval, LimitOf(cfg, "val_check_interval"));
  KILN_ASSIGN_OR_RETURN(o.check_val_every_n_epoch, cfg.Get<int64_t>("check_val_every_n_epoch"));
  KILN_ASSIGN_OR_RETURN(o.num_sanity_val_steps, cfg.Get<int64_t>("num_sanity_val_steps"));
  KILN_ASSIGN_OR_RETURN(config::NodePtr fast, cfg.Get<config::NodePtr>("fast_dev_run"));
  if (fast->kind() == config::NodeKind::kBool) {
    o.fast_dev_run = fast->as_bool() ? 1 : 0;
  } else if (fast->kind() == config::NodeKind::kInt && fast->as_int() >= 0) {
    o.fast_dev_run = fast->as_int();
  } else {
    return Bad(cfg, "fast_dev_run", "must be true, false or a number of batches");
  }
  KILN_ASSIGN_OR_RETURN(o.overfit_batches, cfg.Get<int64_t>("overfit_batches"));
  KILN_ASSIGN_OR_RETURN(o.accumulate_grad_batches, cfg.Get<int64_t>("accumulate_grad_batches"));
  if (o.accumulate_grad_batches < 1) return Bad(cfg, "accumulate_grad_batches", "must be at least 1");
  if (cfg.Get<config::NodePtr>("gradient_clip_val").value()->is_null()) {
    o.gradient_clip_val.reset();
  } else {
    KILN_ASSIGN_OR_RETURN(double clip, cfg.Get<double>("gradient_clip_val"));
    o.gradient_clip_val = clip;
  }
  KILN_ASSIGN_OR_RETURN(std::string clip, cfg.Get<std::string>("gradient_clip_algorithm"));
  o.gradient_clip_algorithm = clip == "value" ? TrainerOptions::ClipAlgorithm::kValue : TrainerOptions::ClipAlgorithm::kNorm;
  if (clip != "norm" && clip != "value") {
    return Bad(cfg, "gradient_clip_algorithm", "must be norm or value");
  }
  KILN_ASSIGN_OR_RETURN(config::NodePtr precision, cfg.Get<config::NodePtr>("precision"));
  std::string precision_text = config::PythonStr(*precision);
  o.precision = precision_text == "bf16-mixed" ? TrainerOptions::Precision::kBf16Mixed : TrainerOptions::Precision::k32;
  if (precision_text != "32" && precision_text != "bf16-mixed" && precision_text != "32-true") {
    return Bad(cfg, "precision", "must be 32 or bf16-mixed (fp16 needs CUDA, which this build lacks)");
  }
  KILN_ASSIGN_OR_RETURN(std::string accelerator, cfg.Get<std::string>("accelerator"));
  o.accelerator = accelerator == "cpu"    ? TrainerOptions::Accelerator::kCpu
                  : accelerator == "cuda" ? TrainerOptions::Accelerator::kCuda
                                          : TrainerOptions::Accelerator::kAuto;
  if (accelerator != "cpu" && accelerator != "cuda" && accelerator != "auto") {
    return Bad(cfg, "accelerator", "must be cpu, cuda or auto");
  }
  KILN_ASSIGN_OR_RETURN(o.devices, cfg.Get<int64_t>("devices"));
  if (o.devices < 1) return Bad(cfg, "devices", "must be at least 1");
  KILN_ASSIGN_OR_RETURN(o.num_nodes, cfg.Get<int64_t>("num_nodes"));
  if (o.num_nodes < 1) return Bad(cfg, "num_nodes", "must be at least 1");
  KILN_ASSIGN_OR_RETURN(o.ddp_bucket_cap_mb, cfg.Get<double>("ddp_bucket_cap_mb"));
  if (!(o.ddp_bucket_cap_mb > 0)) return Bad(cfg, "ddp_bucket_cap_mb", "must be positive");
  KILN_ASSIGN_OR_RETURN(o.ddp_timeout, cfg.Get<double>("ddp_timeout"));
  if (!(o.ddp_timeout > 0)) return Bad(cfg, "ddp_timeout", "must be positive (seconds)");
  KILN_ASSIGN_OR_RETURN(o.process_group_backend, cfg.Get<std::string>("process_group_backend"));
  if (o.process_group_backend != "auto" && o.process_group_backend != "gloo" && o.process_group_backend != "nccl") {
    return Bad(cfg, "process_group_backend", "must be auto, gloo or nccl");
  }
  KILN_ASSIGN_OR_RETURN(o.deterministic, cfg.Get<bool>("deterministic"));
  KILN_ASSIGN_OR_RETURN(o.num_threads, cfg.GetOr<int>("num_threads", 0));
  if (o.num_threads < 0) return Bad(cfg, "num_threads", "must not be negative");
  KILN_ASSIGN_OR_RETURN(o.log_every_n_steps, cfg.Get<int64_t>("log_every_n_steps"));
  if (o.log_every_n_steps < 1) return Bad(cfg, "log_every_n_steps", "must be at least 1");
  KILN_ASSIGN_OR_RETURN(o.enable_progress_bar, cfg.Get<bool>("enable_progress_bar"));
  KILN_ASSIGN_OR_RETURN(o.default_root_dir, cfg.Get<std::string>("default_root_dir"));
  KILN_ASSIGN_OR_RETURN(std::string nonfinite, cfg.Get<std::string>("on_nonfinite_loss"));
  o.on_nonfinite_loss =
      nonfinite == "skip" ? TrainerOptions::NonFiniteLoss::kSkip : TrainerOptions::NonFiniteLoss::kStop;
  KILN_ASSIGN_OR_RETURN(o.channels_last, cfg.Get<bool>("channels_last"));
  if (nonfinite != "stop" && nonfinite != "skip") {
    return Bad(cfg, "on_nonfinite_loss", "must be stop or skip");
  }
  return o;
}

}  // namespace kiln
