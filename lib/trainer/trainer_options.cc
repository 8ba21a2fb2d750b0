#include "lib/trainer/trainer_options.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/status_macros.h"

namespace kiln {

int64_t BatchLimit::Of(int64_t available) const {
  if (!fraction) return std::min<int64_t>(available, static_cast<int64_t>(value));
  return static_cast<int64_t>(std::floor(static_cast<double>(available) * value));
}

namespace {

using config::Node;
using config::NodeKind;

// A fraction of the batches (a float in [0, 1]) or a count (an int >= 0).
std::optional<BatchLimit> ReadLimit(const Node& node) {
  BatchLimit limit;
  if (node.kind() == NodeKind::kInt && node.as_int() >= 0) {
    limit.fraction = false;
    limit.value = static_cast<double>(node.as_int());
    return limit;
  }
  if (node.kind() == NodeKind::kFloat && node.as_float() >= 0 && node.as_float() <= 1.0) {
    limit.value = node.as_float();
    return limit;
  }
  return std::nullopt;
}
constexpr const char* kLimit = "a fraction in [0, 1] (float) or a number of batches (int >= 0)";

// Seconds (a number >= 0) or "DD:HH:MM:SS"; null: no limit.
std::optional<std::optional<double>> ReadSeconds(const Node& node) {
  if (node.is_null()) return std::optional<double>();
  if (node.kind() == NodeKind::kInt && node.as_int() >= 0)
    return std::optional<double>(node.as_int());
  if (node.kind() == NodeKind::kFloat && node.as_float() >= 0)
    return std::optional<double>(node.as_float());
  if (node.kind() != NodeKind::kString) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(node.as_string(), ':');
  if (parts.size() != 4) return std::nullopt;
  double total = 0;
  const double unit[] = {86400, 3600, 60, 1};
  for (size_t i = 0; i < 4; ++i) {
    double v = 0;
    if (!absl::SimpleAtod(parts[i], &v) || v < 0) return std::nullopt;
    total += v * unit[i];
  }
  return std::optional<double>(total);
}

// true (1 batch), false (0) or a number of batches >= 0.
std::optional<int64_t> ReadFastDevRun(const Node& node) {
  if (node.kind() == NodeKind::kBool) return node.as_bool() ? 1 : 0;
  if (node.kind() == NodeKind::kInt && node.as_int() >= 0) return node.as_int();
  return std::nullopt;
}

std::optional<TrainerOptions::ProfilerKind> ReadProfiler(const Node& node) {
  using K = TrainerOptions::ProfilerKind;
  if (node.is_null()) return K::kNone;
  if (!node.is_scalar()) return std::nullopt;
  std::string text = config::PythonStr(node);
  if (text == "simple") return K::kSimple;
  if (text == "advanced") return K::kAdvanced;
  return std::nullopt;
}

// trainer.devices: a count >= 1, or a list of distinct GPU ids >= 0 (its length).
std::optional<int64_t> ReadDevices(const Node& node) {
  if (node.kind() == NodeKind::kInt)
    return node.as_int() >= 1 ? std::optional<int64_t>(node.as_int()) : std::nullopt;
  if (!node.is_list() || node.items().empty()) return std::nullopt;
  std::set<int64_t> ids;
  for (const auto& item : node.items()) {
    if (item->kind() != NodeKind::kInt || item->as_int() < 0 || !ids.insert(item->as_int()).second)
      return std::nullopt;
  }
  return static_cast<int64_t>(ids.size());
}

// An int >= 0, or null for 0 (min_epochs: no minimum; num_threads: every core).
template <typename I>
std::optional<I> ReadCountOrNull(const Node& node) {
  if (node.is_null()) return I{0};
  if (node.kind() == NodeKind::kInt && node.as_int() >= 0) return static_cast<I>(node.as_int());
  return std::nullopt;
}

OptionBinding<TrainerOptions> MakeBinding() {
  OptionBinding<TrainerOptions> b;
  b.Field("max_epochs", &TrainerOptions::max_epochs, "stop after this many epochs", AtLeast(0))
      .Field("max_steps", &TrainerOptions::max_steps,
             "stop after this many optimizer steps (-1: no limit)", AtLeast(-1))
      .Parsed<std::optional<double>>("max_time", &TrainerOptions::max_time, OptionType::kAny,
                                     "null", "stop after this long: seconds or DD:HH:MM:SS",
                                     "seconds or DD:HH:MM:SS", ReadSeconds)
      .Parsed<int64_t>("min_epochs", &TrainerOptions::min_epochs, OptionType::kInt, "null",
                       "train at least this many epochs (early stopping waits)",
                       "an int >= 0 or null", ReadCountOrNull<int64_t>);
  for (auto [name, field, doc] :
       {std::tuple{"limit_train_batches", &TrainerOptions::limit_train_batches,
                   "fraction (float) or count (int) of training batches per epoch"},
        std::tuple{"limit_val_batches", &TrainerOptions::limit_val_batches,
                   "fraction or count of validation batches"},
        std::tuple{"limit_test_batches", &TrainerOptions::limit_test_batches,
                   "fraction or count of test batches"},
        std::tuple{"limit_predict_batches", &TrainerOptions::limit_predict_batches,
                   "fraction or count of prediction batches"},
        std::tuple{"val_check_interval", &TrainerOptions::val_check_interval,
                   "validate every fraction of an epoch (float) or N batches (int)"}}) {
    b.Parsed<BatchLimit>(name, field, OptionType::kAny, "1.0", doc, kLimit, ReadLimit);
  }
  b.Field("check_val_every_n_epoch", &TrainerOptions::check_val_every_n_epoch,
          "validate every N epochs", AtLeast(1))
      .Field("num_sanity_val_steps", &TrainerOptions::num_sanity_val_steps,
             "validation batches run before training, to fail early")
      .Parsed<int64_t>("fast_dev_run", &TrainerOptions::fast_dev_run, OptionType::kAny, "false",
                       "true or N: run N (1) batches of each stage, then stop",
                       "true, false or a number of batches", ReadFastDevRun)
      .Field("overfit_batches", &TrainerOptions::overfit_batches,
             "train and validate on the first N training batches", AtLeast(0))
      .Field("accumulate_grad_batches", &TrainerOptions::accumulate_grad_batches,
             "micro-batches per optimizer step", AtLeast(1))
      .Field("gradient_clip_val", &TrainerOptions::gradient_clip_val,
             "clip gradients (norm or value) at this")
      .Enum("gradient_clip_algorithm", &TrainerOptions::gradient_clip_algorithm,
            {{"norm", TrainerOptions::ClipAlgorithm::kNorm},
             {"value", TrainerOptions::ClipAlgorithm::kValue}},
            "norm or value")
      .Enum("precision", &TrainerOptions::precision,
            {{"32", TrainerOptions::Precision::k32},
             {"32-true", TrainerOptions::Precision::k32},
             {"bf16-mixed", TrainerOptions::Precision::kBf16Mixed},
             {"bf16", TrainerOptions::Precision::kBf16Mixed},
             {"bf16-true", TrainerOptions::Precision::kBf16True},
             {"16-mixed", TrainerOptions::Precision::k16Mixed},
             {"16", TrainerOptions::Precision::k16Mixed},
             {"auto", TrainerOptions::Precision::kAuto}},
            "32, bf16-mixed (bfloat16 autocast, float32 weights), bf16-true (bfloat16 "
            "weights and optimizer state; checkpoints float32), 16-mixed (float16 autocast with "
            "dynamic loss scaling) or auto (bf16-mixed where the CPU "
            "has avx512_bf16 or amx_bf16 or the GPU has bf16 units, else 32)")
      .Parsed<TrainerOptions::ProfilerKind>("profiler", &TrainerOptions::profiler,
                                            EnumOptionType({"simple", "advanced"}), "null",
                                            "null, simple (time per training phase at the end of "
                                            "fit) or advanced (LibTorch's operator "
                                            "profile of the training batches profiler_wait + "
                                            "profiler_warmup + 1 to + profiler_active as a "
                                            "Chrome trace in the run directory)",
                                            "null, simple or advanced", ReadProfiler)
      .Field("profiler_wait", &TrainerOptions::profiler_wait,
             "advanced profiler: training batches skipped before the warm-up", AtLeast(0))
      .Field("profiler_warmup", &TrainerOptions::profiler_warmup,
             "advanced profiler: warm-up batches after the wait, not recorded", AtLeast(0))
      .Field("profiler_active", &TrainerOptions::profiler_active,
             "advanced profiler: training batches recorded", AtLeast(1))
      .Enum("accelerator", &TrainerOptions::accelerator,
            {{"auto", TrainerOptions::Accelerator::kAuto},
             {"cpu", TrainerOptions::Accelerator::kCpu},
             {"cuda", TrainerOptions::Accelerator::kCuda}},
            "cpu, cuda or auto")
      .Parsed<int64_t>("devices", &TrainerOptions::devices, OptionType::kAny, "1",
                       "processes per node: N > 1 trains data-parallel in N worker processes; a "
                       "list of GPU ids ([0, 2]) picks the GPUs, one process each",
                       "a count >= 1 or a list of distinct GPU ids >= 0", ReadDevices)
      .Field("num_nodes", &TrainerOptions::num_nodes,
             "nodes (each runs kiln with NODE_RANK, MASTER_ADDR and MASTER_PORT set)", AtLeast(1))
      .Field("ddp_bucket_cap_mb", &TrainerOptions::ddp_bucket_cap_mb,
             "data parallel: gradient bucket size in MB (reduced as backward fills them)",
             GreaterThan(0))
      .Field("ddp_find_unused_parameters", &TrainerOptions::ddp_find_unused_parameters,
             "data parallel: find the parameters a step's loss does not use, so that their "
             "(zero) gradients do not hold up the reduction (DDP's find_unused_parameters)")
      .Field("ddp_timeout", &TrainerOptions::ddp_timeout,
             "data parallel: seconds to wait for other workers before giving up", GreaterThan(0))
      .Enum("strategy", &TrainerOptions::strategy,
            {{"auto", TrainerOptions::StrategyKind::kAuto},
             {"ddp", TrainerOptions::StrategyKind::kDdp},
             {"fsdp", TrainerOptions::StrategyKind::kFsdp}},
            "auto or ddp (data parallel: each worker holds the whole model), or fsdp (the "
            "parameters, gradients and optimizer state sharded across the workers)")
      .Enum("fsdp_sharding_strategy", &TrainerOptions::fsdp_sharding_strategy,
            {{"FULL_SHARD", TrainerOptions::Sharding::kFullShard},
             {"SHARD_GRAD_OP", TrainerOptions::Sharding::kShardGradOp},
             {"NO_SHARD", TrainerOptions::Sharding::kNoShard},
             {"HYBRID_SHARD", TrainerOptions::Sharding::kHybridShard}},
            "fsdp: FULL_SHARD (parameters, gradients, optimizer state), SHARD_GRAD_OP "
            "(gradients and optimizer state), NO_SHARD (as ddp) or HYBRID_SHARD (full within a "
            "node, replicated across nodes)")
      .Field("fsdp_auto_wrap_policy", &TrainerOptions::fsdp_auto_wrap_policy,
             "fsdp: the units gathered one at a time: blocks (each transformer block), size "
             "(runs of consecutive blocks of at least fsdp_min_num_params parameters) or none "
             "(the whole model as one unit)",
             OneOf({"blocks", "size", "none"}))
      .Field("fsdp_min_num_params", &TrainerOptions::fsdp_min_num_params,
             "fsdp_auto_wrap_policy=size: the parameters a unit holds at least (blocks are "
             "grouped until they reach it)",
             AtLeast(1))
      .Field("fsdp_cpu_offload", &TrainerOptions::fsdp_cpu_offload,
             "fsdp: keep the parameters' pieces, their gradients and the optimizer state in the "
             "CPU's memory between steps, the optimizer stepping there (the GPU holds only the "
             "units it computes)")
      .Field("table_sharding", &TrainerOptions::table_sharding,
             "several workers: how a model's embedding tables (dlrm, dcn_v2) are sharded "
             "across them: table_wise (whole tables, balanced), row_wise (every table in row "
             "blocks) or auto (row-wise for tables larger than an even share, else table-wise)",
             OneOf({"auto", "table_wise", "row_wise"}))
      .Field("process_group_backend", &TrainerOptions::process_group_backend,
             "data parallel: gloo (CPU), nccl (CUDA) or auto", OneOf({"auto", "gloo", "nccl"}))
      .Field("deterministic", &TrainerOptions::deterministic, "use deterministic algorithms only")
      .Parsed<int>("num_threads", &TrainerOptions::num_threads, OptionType::kInt, "null",
                   "LibTorch threads (null: every core)", "an int >= 0 or null",
                   ReadCountOrNull<int>)
      .Field("log_every_n_steps", &TrainerOptions::log_every_n_steps,
             "log training metrics every N optimizer steps", AtLeast(1))
      .Field("enable_progress_bar", &TrainerOptions::enable_progress_bar,
             "show progress (live in a terminal, plain lines otherwise)")
      .Field("default_root_dir", &TrainerOptions::default_root_dir,
             "where checkpoints go when no callback says otherwise")
      .Enum("on_nonfinite_loss", &TrainerOptions::on_nonfinite_loss,
            {{"stop", TrainerOptions::NonFiniteLoss::kStop},
             {"skip", TrainerOptions::NonFiniteLoss::kSkip}},
            "stop (with a message) or skip the step when the loss is NaN/Inf")
      .Enum("on_save_error", &TrainerOptions::on_save_error,
            {{"stop", TrainerOptions::SaveError::kStop},
             {"continue", TrainerOptions::SaveError::kContinue}},
            "when a checkpoint cannot be written (full disk, I/O error): stop with one line, or "
            "continue training without checkpoints; the previous checkpoint stays whole either way")
      .Field("channels_last", &TrainerOptions::channels_last,
             "keep 4-D weights and image batches in channels-last (NHWC) memory order: faster "
             "convolutions")
      .Field("matmul_precision", &TrainerOptions::matmul_precision,
             "float32 matrix products: highest (float32), high (TF32 on CUDA) or medium (bf16 "
             "allowed), as torch.set_float32_matmul_precision",
             OneOf({"highest", "high", "medium"}))
      .Field("cudnn_benchmark", &TrainerOptions::cudnn_benchmark,
             "cuDNN times its convolution algorithms for each new shape and keeps the fastest "
             "(torch.backends.cudnn.benchmark)")
      .Field("cuda_graphs", &TrainerOptions::cuda_graphs,
             "capture the training step (forward, backward, optimizer) as CUDA graphs after "
             "warm-up and replay them: static shapes, one GPU (docs/gpu.md)");
  return b;
}

}  // namespace

const OptionBinding<TrainerOptions>& TrainerOptions::Binding() {
  static const OptionBinding<TrainerOptions>* binding =
      new OptionBinding<TrainerOptions>(MakeBinding());
  return *binding;
}

const OptionSchema& TrainerOptions::Schema() { return Binding().schema(); }

absl::StatusOr<TrainerOptions> TrainerOptions::FromConfig(const config::Config& trainer) {
  KILN_ASSIGN_OR_RETURN(config::NodePtr applied,
                        Schema().Apply(*trainer.node(), trainer.prefix(), "the trainer"));
  TrainerOptions options = Binding().Fill(config::Config(applied, trainer.prefix()));
  config::NodePtr devices = applied->Find("devices");
  options.devices_listed = devices != nullptr && devices->is_list();
  const std::string key = trainer.prefix().empty() ? "" : trainer.prefix() + ".";
  if (options.devices_listed && options.accelerator == Accelerator::kCpu) {
    // The words `kiln` says before starting workers (lib/app/application.cc, UseListedGpus).
    return absl::InvalidArgumentError(absl::StrCat(key, "devices lists GPU ids, but ", key,
                                                   "accelerator=cpu: give a count (", key,
                                                   "devices=", options.devices, ")"));
  }
  if (options.fsdp_cpu_offload) {
    if (options.strategy != StrategyKind::kFsdp) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, "fsdp_cpu_offload=true offloads fsdp's pieces, and ", key,
          "strategy is not fsdp (data parallel keeps the whole model on each device): set ", key,
          "strategy=fsdp, or drop the offload"));
    }
    if (options.fsdp_sharding_strategy == Sharding::kNoShard) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, "fsdp_cpu_offload=true offloads pieces, and ", key,
                       "fsdp_sharding_strategy=NO_SHARD makes none (it is data parallel): use "
                       "FULL_SHARD, SHARD_GRAD_OP or HYBRID_SHARD"));
    }
  }
  return options;
}

}  // namespace kiln
