// Where the model runs and how ranks cooperate (Lightning's Strategy with its accelerator and
// precision): the device, the memory order of inputs and weights, bf16 autocast, and data
// parallelism over a c10d process group — gradient reduction, rank 0's weights on every rank,
// agreement between ranks (any rank, average over ranks). The loops ask the strategy; they never
// talk to the process group themselves.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/grad_scaler.h"
#include "lib/trainer/trainer_options.h"

namespace kiln {

namespace distributed {
class DataParallel;
class FullyShardedDataParallel;
class ShardedTables;
class ProcessGroup;
}  // namespace distributed

// Bytes of what a rank keeps of the model between steps: its parameters (with fsdp, its pieces),
// those of them that train (their gradients are as large), and the optimizer's state for them.
struct ModelStateBytes {
  int64_t parameters = 0, parameters_trained = 0, optimizer = 0;
};

class Strategy {
 public:
  explicit Strategy(const TrainerOptions& options) : options_(options) {}
  ~Strategy();

  void set_process_group(std::shared_ptr<distributed::ProcessGroup> group) {
    group_ = std::move(group);
  }
  int global_rank() const;
  int world_size() const;
  bool distributed() const { return world_size() > 1; }

  // Applies the process-wide settings (threads shared among this machine's ranks, allocator;
  // see process_settings.h) and returns the thread count.
  int ConfigureProcess() const;
  // Chooses the device from trainer.accelerator (refuses cuda without a CUDA device), then the
  // precision from trainer.precision and the CPU (precision.h), saying which once per process.
  absl::Status SelectDevice();
  const torch::Device& device() const { return device_; }
  // Forward passes (and the loss) run under bf16 autocast: trainer.precision resolved.
  bool bf16_autocast() const { return bf16_autocast_; }
  // Forward passes run under autocast (bf16-mixed, bf16-true or 16-mixed), to this dtype.
  bool autocast() const { return bf16_autocast_ || scaler_ != nullptr; }
  at::ScalarType autocast_dtype() const { return scaler_ != nullptr ? at::kHalf : at::kBFloat16; }
  // 16-mixed's loss scaling (Backward scales the loss; the loop unscales and checks before the
  // optimizer step); null in other precisions.
  GradScaler* scaler() const { return scaler_.get(); }
  // bf16-true: PlaceModule turns the weights and buffers to bf16 (the optimizer state follows
  // them) and InputToDevice floating inputs; forward passes still run under autocast, so losses
  // and autocast's float32 ops compute in float32.
  bool bf16_weights() const { return bf16_weights_; }

  // Moves the module to the device (and to channels-last order when configured; to bf16 for
  // bf16-true).
  // bf16-true refuses, in one line, a model with a layer that has no bf16 kernel on the CPU in
  // this LibTorch (EmbeddingBag: bag_of_embeddings), before changing anything.
  absl::Status PlaceModule(torch::nn::Module& module) const;
  torch::Tensor ToDevice(const torch::Tensor& t) const;
  // A batch's input on the device, in the configured memory order (and bf16 for bf16-true).
  torch::Tensor InputToDevice(const torch::Tensor& t) const;
  // A batch on the device: its input as InputToDevice puts it, its targets and the segments of
  // packed rows as they are.
  void BatchToDevice(data::Batch& batch) const;

  // Sets up gradient reduction and rank 0's weights on every rank, and logs what one blocking
  // all-reduce of all gradients costs. Nothing to do alone.
  absl::Status SetupDataParallel(torch::nn::Module& module);
  // The trained parameters changed between steps (backbone_finetuning unfroze some): gradient
  // reduction is set up anew over those that now require a gradient, so every rank averages
  // theirs too. Nothing to do alone, or before SetupDataParallel (it takes them then).
  absl::Status TrainedParametersChanged(torch::nn::Module& module);
  // Before each forward pass of training: buffers (BatchNorm statistics) from rank 0; with fsdp,
  // the root's parameters whole.
  absl::Status BeforeTrainingForward();
  // fsdp: before each forward of evaluation or prediction (the root's parameters whole), and after
  // the last (every parameter back to its piece). Nothing to do otherwise.
  absl::Status BeforeEvaluationForward();
  absl::Status AfterEvaluation();
  // trainer.strategy=fsdp is sharding the model: its parameters hold this rank's pieces between
  // steps (lib/distributed/fully_sharded.h).
  // Also with sharded embedding tables (several workers and a model with tables): each rank holds
  // its own piece of them (lib/distributed/sharded_tables.h).
  bool sharded() const { return sharded_ != nullptr || tables_ != nullptr; }
  // After fit: the model whole on every rank again (testing, prediction and export read it as
  // they read any model). Nothing to do without fsdp.
  absl::Status EndSharding();
  // The model (sharded tables, fsdp's pieces) gathered whole by EndSharding (the default), or left
  // in its pieces: a model larger than one worker ends its fit as it trained.
  void set_whole_model_after_fit(bool whole) { whole_model_after_fit_ = whole; }
  // Gradient clipping by norm over all the pieces of all ranks (fsdp).
  absl::Status ClipShardedGradNorm(double max_norm);
  // fsdp: the optimizer's state, restored whole from a checkpoint before the model was sharded,
  // cut to this rank's pieces (after SetupDataParallel). Optimizers whose state kiln does not know
  // are refused in one line when they hold state.
  absl::Status ShardOptimizerState(torch::optim::Optimizer& optimizer);
  // fsdp: what a sharded checkpoint's meta.json says of the model and run (the run's id is rank
  // 0's, the same on every rank).
  std::map<std::string, std::vector<int64_t>> sharded_shapes() const;
  // What this rank holds of `module` and `optimizer` between steps.
  static ModelStateBytes ModelState(torch::nn::Module& module, torch::optim::Optimizer& optimizer);
  const std::string& sharded_run() const { return sharded_run_; }
  // A sharded checkpoint's pieces: how many, and which one this rank holds. Under HYBRID_SHARD
  // over several nodes, a node's ranks hold the pieces and the other nodes the same ones again:
  // only node 0's write theirs (writes_piece).
  int piece_count() const;
  int piece_index() const;
  bool writes_piece() const { return global_rank() == piece_index(); }
  // The backward pass of `loss`; with several ranks the step's last backward (`sync`) averages
  // the gradients summed over micro-batches over the ranks.
  absl::Status Backward(const torch::Tensor& loss, bool sync);

  // Where collectives take their tensors: the model's device for a backend that only reduces
  // tensors on it (NCCL), the CPU for Gloo. The agreements below move their (CPU) tensors there
  // and back, so callers never care which backend runs.
  static torch::Device CollectiveDevice(const std::string& backend, const torch::Device& device);

  // True when `local` holds on any rank (every rank gets the same answer).
  absl::StatusOr<bool> AnyRank(bool local);
  // The element-wise maximum of `values` over ranks.
  absl::Status MaxOverRanks(torch::Tensor& values);
  // Replaces per-rank means by their average over ranks (equal shards, so the global mean).
  absl::Status AverageOverRanks(std::map<std::string, double>& means);
  // Sums `t` over ranks in place (metric state).
  absl::Status SumOverRanks(torch::Tensor& t);
  absl::Status Barrier();

 private:
  // All-reduces `t` in place (sum, or max), on the collective device.
  absl::Status AllReduce(torch::Tensor& t, bool max);
  // Gradient reduction over `module`'s trained parameters, with the options' buckets.
  std::shared_ptr<distributed::DataParallel> MakeDataParallel(torch::nn::Module& module) const;

  const TrainerOptions& options_;
  torch::Device device_{torch::kCPU};
  bool bf16_autocast_ = false;
  std::shared_ptr<GradScaler> scaler_;
  bool bf16_weights_ = false;
  bool precision_logged_ = false;
  std::shared_ptr<distributed::ProcessGroup> group_;
  std::shared_ptr<distributed::DataParallel> data_parallel_;
  std::shared_ptr<distributed::FullyShardedDataParallel> sharded_;
  // HYBRID_SHARD over several nodes: this node's ranks (the model is sharded among them).
  std::shared_ptr<distributed::ProcessGroup> node_group_;
  std::shared_ptr<distributed::ShardedTables> tables_;
  bool whole_model_after_fit_ = true;
  std::string sharded_run_;
  // The run's id in every piece of its sharded checkpoints: rank 0's, shared.
  absl::Status ShareShardedRun();
  // Shards the tables of a model that has some with sparse gradients; false when it has none.
  absl::StatusOr<bool> SetupTableSharding(torch::nn::Module& module);
  // Shards the module (trainer.strategy=fsdp): the units from the auto-wrap policy.
  absl::Status SetupSharding(torch::nn::Module& module);
};

// Autocast on the strategy's device (CPU or CUDA) for its lifetime when the strategy chose mixed
// precision: bf16 for bf16-mixed and bf16-true, float16 for 16-mixed.
class AutocastScope {
 public:
  explicit AutocastScope(const Strategy& strategy);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  at::DeviceType device_;
  at::ScalarType dtype_;
};

}  // namespace kiln
