// Data parallelism on a ProcessGroup, as PyTorch's DistributedDataParallel does it, with its own
// c10d::Reducer: parameters and buffers start from rank 0's, and gradients are averaged in buckets
// while backward is still producing them. A backward that follows Skip() (a gradient-accumulation
// micro-step) does not communicate; its gradients accumulate locally and are reduced with the
// next synchronized one.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "absl/status/status.h"
#include "lib/distributed/process_group.h"

namespace c10d {
class Reducer;
}

namespace kiln::distributed {

class DataParallel {
 public:
  // `bucket_cap_mb` as in DDP (25); the first bucket is 1 MiB so reduction starts early.
  DataParallel(std::shared_ptr<ProcessGroup> group, torch::nn::Module& module, double bucket_cap_mb);
  ~DataParallel();

  // Makes every rank's parameters and buffers equal to rank 0's; checks that the models match.
  absl::Status SyncModuleStates();
  // Call before a forward pass whose backward must reduce gradients; skipped for micro-steps.
  void PrepareSyncedBackward();
  // Buffers (BatchNorm statistics) from rank 0 before each forward, as DDP's broadcast_buffers.
  absl::Status BroadcastBuffers();

  ProcessGroup& group() { return *group_; }
  size_t num_buckets() const { return num_buckets_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  torch::nn::Module& module_;
  std::unique_ptr<c10d::Reducer> reducer_;
  size_t num_buckets_ = 0;
};

}  // namespace kiln::distributed
