// A c10d process group (Gloo on CPU; the engine behind PyTorch's DDP) with its rendezvous store,
// and the few collectives the trainer needs. Every call turns a peer's failure (a worker that died,
// a timeout) into a Status that says so, never a hang or an exception.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/run/environment.h"

namespace kiln::distributed {

struct ProcessGroupOptions {
  std::string backend = "auto";  // auto (nccl when `cuda`, else gloo) | gloo | nccl (a CUDA build)
  bool cuda = false;             // the ranks train on CUDA devices
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // rendezvous and every collective
};

class ProcessGroup {
 public:
  // Rendezvous at MASTER_ADDR:MASTER_PORT through a c10d TCPStore (rank 0 hosts it), then builds
  // the group. GLOO_SOCKET_IFNAME picks the network interface, as in PyTorch.
  static absl::StatusOr<std::shared_ptr<ProcessGroup>> Create(const run::Environment& env,
                                                              const ProcessGroupOptions& options);

  // The group of `ranks` (ranks of this group; this rank among them), on the same rendezvous
  // store under `name`, which names one group of the job (every member passes the same ranks
  // and name). Its ranks count from 0 in the order given.
  absl::StatusOr<std::shared_ptr<ProcessGroup>> Subgroup(const std::vector<int>& ranks,
                                                         const std::string& name);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_global_zero() const { return rank_ == 0; }
  const std::string& backend() const { return backend_; }
  c10::intrusive_ptr<c10d::ProcessGroup> group() const { return group_; }

  absl::Status Barrier();
  // In place: sum or max over ranks.
  absl::Status AllReduce(torch::Tensor& tensor, c10d::ReduceOp op = c10d::ReduceOp::SUM);
  // Rank 0's values into every rank's tensors, in coalesced buffers.
  absl::Status Broadcast(std::vector<torch::Tensor> tensors);
  // Rank 0's `value` for `key` on every rank (small things: the run directory, the config).
  absl::StatusOr<std::string> ShareFromRankZero(const std::string& key, const std::string& value);

  // Runs `fn`, turning a c10d/Gloo exception into a Status that names this rank.
  absl::Status Guard(const std::string& what, const std::function<void()>& fn);

 private:
  // Builds the c10d group (Gloo, and NCCL for CUDA tensors) on the store under `prefix`.
  absl::Status Join(const std::string& prefix, const std::string& nccl_prefix);

  int rank_ = 0, world_size_ = 1;
  std::string backend_;
  std::string name_;  // "" for the job's group; a subgroup's name
  std::string master_addr_;
  ProcessGroupOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

}  // namespace kiln::distributed
