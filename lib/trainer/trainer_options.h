// Everything `trainer:` in the config can set, declared once (an OptionBinding onto this struct,
// in trainer_options.cc): unknown keys, wrong types and unusable values are refused with the key
// and file:line in the one option message, values are parsed once into typed fields (enums,
// seconds, batch limits), and `kiln list` shows the same declaration.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/registry/options.h"

namespace kiln {

// A batch limit given as a fraction of the loader (0.25) or a count of batches (10).
struct BatchLimit {
  bool fraction = true;
  double value = 1.0;
  int64_t Of(int64_t available) const;
};

struct TrainerOptions {
  int64_t max_epochs = 10;
  int64_t max_steps = -1;          // optimizer steps; -1: no limit
  std::optional<double> max_time;  // seconds
  int64_t min_epochs = 0;
  BatchLimit limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches;
  BatchLimit val_check_interval;  // fraction of an epoch or a batch count
  int64_t check_val_every_n_epoch = 1;
  int64_t num_sanity_val_steps = 2;
  int64_t fast_dev_run = 0;     // >0: that many batches of each stage, one epoch, no checkpoints
  int64_t overfit_batches = 0;  // >0: train and validate on the first N training batches
  int64_t accumulate_grad_batches = 1;
  std::optional<double> gradient_clip_val;
  enum class ClipAlgorithm { kNorm, kValue };
  ClipAlgorithm gradient_clip_algorithm = ClipAlgorithm::kNorm;
  // "32" (or "32-true"), "bf16-mixed" (or "bf16"), "bf16-true" (bf16 weights and optimizer
  // state, no float32 master copy), "auto": bf16-mixed where the CPU has bf16 hardware
  // (lib/trainer/precision.h), else 32.
  // "16-mixed" (or "16"): float16 autocast with dynamic loss scaling (grad_scaler.h).
  enum class Precision { k32, kBf16Mixed, kBf16True, k16Mixed, kAuto };
  Precision precision = Precision::k32;
  // Lightning's names: null (none), "simple" (time per training phase, printed at the end of fit),
  // "advanced" (LibTorch's operator profile of some training steps as a Chrome trace; profiler.h).
  enum class ProfilerKind { kNone, kSimple, kAdvanced };
  ProfilerKind profiler = ProfilerKind::kNone;
  // The advanced profiler's window, as torch.profiler.schedule's: `wait` batches, then `warmup`
  // batches, both unrecorded (this LibTorch's legacy profiler has no warm-up mode, so the two
  // add up), then `active` batches recorded.
  int64_t profiler_wait = 1;
  int64_t profiler_warmup = 1;
  int64_t profiler_active = 20;
  enum class Accelerator { kAuto, kCpu, kCuda };
  Accelerator accelerator = Accelerator::kAuto;
  bool deterministic = false;
  int num_threads = 0;  // 0: every core
  int64_t log_every_n_steps = 50;
  bool enable_progress_bar = true;
  std::string default_root_dir = ".";
  enum class NonFiniteLoss { kStop, kSkip };  // stop with a message, or skip the step
  NonFiniteLoss on_nonfinite_loss = NonFiniteLoss::kStop;
  enum class SaveError {
    kStop,
    kContinue
  };  // a checkpoint write that fails: stop, or train on without
  SaveError on_save_error = SaveError::kStop;
  bool channels_last = false;
  // float32 matmuls: "highest" (float32), "high" (TF32 on CUDA), "medium" (bf16 allowed), as
  // torch.set_float32_matmul_precision; process-wide.
  std::string matmul_precision = "highest";
  bool cudnn_benchmark = false;  // cuDNN tries its algorithms per shape and keeps the fastest
  // The training step captured as CUDA graphs after warm-up and replayed (docs/gpu.md#cuda-graphs).
  bool cuda_graphs = false;
  // Data parallel (one process per device; see lib/distributed).
  int64_t devices = 1;  // processes per node that `kiln train` starts
  // trainer.devices was a list of GPU ids (Lightning's devices=[0, 2]): `kiln` made them the
  // visible GPUs (CUDA_VISIBLE_DEVICES), one per process; they need a GPU.
  bool devices_listed = false;
  int64_t num_nodes = 1;          // nodes; each runs `kiln train` with NODE_RANK set
  double ddp_bucket_cap_mb = 25;  // gradient bucket size, as DDP's bucket_cap_mb
  // DDP's find_unused_parameters: after each forward, the parameters the loss does not depend on
  // are marked ready (their gradient reduced as zero) instead of being waited for.
  bool ddp_find_unused_parameters = false;
  double ddp_timeout = 1800;  // seconds a rendezvous or collective may wait for a peer
  // Lightning's strategy: auto and ddp are data parallel (every worker holds the whole model),
  // fsdp shards it (lib/distributed/fully_sharded.h).
  enum class StrategyKind { kAuto, kDdp, kFsdp };
  StrategyKind strategy = StrategyKind::kAuto;
  // FSDP's sharding_strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD (data parallel), HYBRID_SHARD
  // (full sharding within each node, the nodes replicas of each other; on one node FULL_SHARD).
  enum class Sharding { kFullShard, kShardGradOp, kNoShard, kHybridShard };
  Sharding fsdp_sharding_strategy = Sharding::kFullShard;
  // Units: each transformer block (blocks), runs of blocks of at least fsdp_min_num_params
  // parameters (size), or the whole model as one (none).
  std::string fsdp_auto_wrap_policy = "blocks";
  int64_t fsdp_min_num_params = 100000000;  // torch's size_based_auto_wrap_policy default
  // Lightning's cpu_offload: between steps the pieces, their gradients and the optimizer's state
  // in the CPU's memory, the optimizer stepping there (a GPU holds the units it computes).
  bool fsdp_cpu_offload = false;
  // With several workers, the embedding tables of a model that has them (dlrm, dcn_v2) are
  // sharded across the workers, the rest data-parallel (lib/distributed/sharded_tables.h).
  std::string table_sharding = "auto";
  std::string process_group_backend =
      "auto";  // auto | gloo | nccl (handed to lib/distributed as is)

  static const OptionBinding<TrainerOptions>& Binding();
  static const OptionSchema& Schema();
  // `trainer` is the `trainer:` node; `seconds` like "00:01:30:00" (DD:HH:MM:SS) or a number.
  static absl::StatusOr<TrainerOptions> FromConfig(const config::Config& trainer);
};

}  // namespace kiln
