// Fully sharded data parallelism (ZeRO stages 2 and 3; PyTorch's FSDP2 `fully_shard`) on a
// ProcessGroup. Each parameter is split into world-size equal pieces along its first dimension
// (zero-padded), and between steps every rank holds only its piece: the module's own parameter
// tensors then hold that piece, so the optimizer steps, and keeps its state for, 1/N of the model,
// and anything that walks module.parameters() between steps sees the shards.
//
// The model is cut into units (a transformer's blocks, see sharding_units.h) plus the root (every
// parameter in no unit). Before a unit's forward, its pieces are all-gathered into one buffer and
// the parameters point into it; FULL_SHARD frees the buffer after the forward and gathers it again
// when the backward reaches the unit, SHARD_GRAD_OP keeps it until the unit's backward is done.
// The unit's gradients are reduce-scattered (averaged) as soon as the last of them is accumulated,
// so each rank keeps only its piece's gradient; the root is gathered before the model's forward
// and reduced at the end of the backward. While a unit computes, the next one's all-gather is
// already on the wire (Gloo's threads, or NCCL's stream).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/distributed/process_group.h"
#include "lib/distributed/sharding_units.h"

namespace kiln::distributed {

struct FullyShardedOptions {
  // FULL_SHARD: parameters, gradients and optimizer state sharded; SHARD_GRAD_OP: gradients and
  // optimizer state (parameters gathered from a unit's forward to the end of its backward).
  bool reshard_after_forward = true;
  // Mixed precision: float32 parameters gathered in this dtype (bf16), so the units compute with
  // it; gradients are reduced, and the optimizer steps, in float32.
  std::optional<at::ScalarType> gather_dtype;
  // HYBRID_SHARD: the group holds the ranks of one node, which share the model between them;
  // this group holds this rank's peers in the other nodes (the same piece), over which the
  // reduced pieces of the gradients are averaged again. Null: no replication.
  std::shared_ptr<ProcessGroup> replicate_group;
  // CPU offload (Lightning's cpu_offload, FSDP2's CPUOffloadPolicy): between steps the pieces,
  // their gradients and so the optimizer's state are in the CPU's memory (pinned when the model
  // computes on a GPU). A unit's pieces are copied to the device for its all-gather, its reduced
  // gradient pieces come back, and the optimizer steps on the CPU. On a CPU nothing moves.
  bool offload_to_cpu = false;
};

// What one rank holds between steps, in bytes.
struct ShardedMemory {
  int64_t full_parameter_bytes = 0;   // the whole model's parameters
  int64_t shard_parameter_bytes = 0;  // this rank's pieces (padding included)
  int64_t largest_unit_bytes = 0;     // the largest gathered unit (root included)
  int64_t units = 0;                  // units, root not counted
};

class FullyShardedDataParallel : public UnitHooks {
 public:
  // Shards `module` over `group` (null: one process, world size 1): rank 0's parameters and buffers
  // first go to every rank, then each parameter keeps this rank's piece. Parameters the model
  // built as pieces (KeepOwnPieces, sharding_units.h) are kept as they are. Each unit is a run of
  // submodules of `module` that run through RunUnit one after the other (a transformer's blocks,
  // one or several): gathered at the first one's input, resharded after the last one's output.
  static absl::StatusOr<std::unique_ptr<FullyShardedDataParallel>> Create(
      std::shared_ptr<ProcessGroup> group, torch::nn::Module& module,
      const std::vector<std::vector<std::shared_ptr<torch::nn::Module>>>& units,
      const FullyShardedOptions& options);
  ~FullyShardedDataParallel() override;

  // Before a forward (training, evaluation or prediction): the root's parameters whole. In
  // training, the gradients accumulated so far (micro-steps) are put aside until the backward's
  // own are reduced and added to them.
  absl::Status BeforeForward(bool training);
  // After the backward: units whose gradients did not all arrive (parameters the loss did not
  // use) reduce now, as does the root; every parameter is back to its piece.
  absl::Status FinishBackward();
  // After evaluation or prediction: every parameter back to its piece.
  absl::Status Reshard();
  // Gradient clipping by the norm of all gradients over all ranks (each holding pieces);
  // returns that norm.
  absl::StatusOr<double> ClipGradNorm(double max_norm);
  // Every parameter whole on every rank until Reshard (a consolidated checkpoint, export): a
  // collective, every rank calls it.
  absl::Status GatherAll();

  // The end of sharding: every parameter whole on every rank from now on, the hooks removed (after
  // fit: testing, prediction and export see the whole model). A collective.
  absl::Status Unshard();

  ShardedMemory memory() const;
  // Each parameter's whole shape, by name (a sharded checkpoint's description).
  std::map<std::string, std::vector<int64_t>> whole_shapes() const;
  // Optimizer state made for the whole parameters (restored from a checkpoint before sharding) cut
  // to this rank's pieces: `state_of(param)` lists the state tensors of a parameter (empty when it
  // has none yet); each one with the parameter's whole shape is replaced by its piece.
  void ShardState(const std::function<std::vector<torch::Tensor*>(const torch::Tensor&)>& state_of);
  int world_size() const { return world_; }

  torch::Tensor BeforeForward(const torch::nn::Module& unit, const torch::Tensor& input) override;
  void AfterForward(const torch::nn::Module& unit, const torch::Tensor& output) override;

  struct Unit;
  struct UnitParam;

  // Runs `fn` (a backward, a collective) and turns what it throws (a peer's failure, a kernel's
  // error) into a Status that names fsdp, `what` and, with a group, this rank.
  absl::Status Guard(const std::string& what, const std::function<void()>& fn);

 private:
  FullyShardedDataParallel() = default;
  // Starts the unit's all-gather (a prefetch) unless it is gathered or on the way.
  void StartGather(Unit& unit);
  // The unit's parameters whole: waits for its all-gather (starting it if need be).
  void Gather(Unit& unit);
  void ReduceScatter(Unit& unit);
  void ReshardUnit(Unit& unit);
  void PreBackward(Unit& unit);
  // Waits for the all-gathers still on the way and leaves every unit sharded.
  void DropPrefetches();
  // The backward is through the unit (the gradient of its input is whole): its gradients are too.
  void PostBackward(Unit& unit);
  // Waits for the reduce-scatter in flight and hands its unit's pieces their gradients.
  void FinishReduce();
  Unit* Find(const torch::nn::Module& module);
  // A tensor of its own with `t`'s values on the pieces' device; from a GPU to the CPU (offload)
  // the copy is queued, and WaitForHostCopies waits for all of them.
  torch::Tensor PieceCopy(const torch::Tensor& t);
  void WaitForHostCopies();

  std::shared_ptr<ProcessGroup> group_;
  FullyShardedOptions options_;
  int rank_ = 0, world_ = 1;
  // Where the units compute (the model's device), and where the pieces, their gradients and the
  // optimizer's state are between steps (the CPU with offload_to_cpu).
  torch::Device compute_device_{torch::kCPU}, piece_device_{torch::kCPU};
  // Reduced gradient pieces are being copied to the CPU (offload from a GPU): FinishBackward waits.
  bool copying_to_host_ = false;
  std::vector<std::unique_ptr<Unit>> units_;  // units in forward order, then the root
  // What every unit's all-gather sends from and receives into, per dtype, sized for the largest
  // unit: one gather is on the way at a time, and buffers made per gather (below glibc's mmap
  // threshold, kept for reuse) left holes among the activations that the next one could not use.
  struct GatherBuffers {
    torch::Tensor send, recv;
  };
  std::map<at::ScalarType, GatherBuffers> gather_buffers_;
  Unit* gathering_ = nullptr;  // the unit whose all-gather uses them now
  bool training_forward_ = false;
  struct Reducing {
    Unit* unit = nullptr;
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor in, out;
  } reducing_;
};

}  // namespace kiln::distributed
