// Data parallelism on a ProcessGroup, as PyTorch's DistributedDataParallel does it, with its own
// c10d::Reducer: parameters and buffers start from rank 0's, and gradients are averaged in buckets
// while backward is still producing them. A backward that follows Skip() (a gradient-accumulation
// micro-step) does not communicate; its gradients accumulate locally and are reduced with the
// next synchronized one.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/distributed/process_group.h"

namespace c10d {
class Reducer;
}

namespace kiln::distributed {

class DataParallel {
 public:
  // `bucket_cap_mb` as in DDP (25); the first bucket is 1 MiB so reduction starts early.
  // `find_unused_parameters` as in DDP: each synced backward first walks the loss's autograd graph
  // and marks the parameters it does not reach as ready, so that the reduction does not wait for
  // gradients that never come (a model whose steps leave some parameters out).
  // `local`: parameters each rank holds its own piece of (sharded tables, sharded_tables.h),
  // which are neither compared, broadcast nor reduced.
  DataParallel(std::shared_ptr<ProcessGroup> group, torch::nn::Module& module, double bucket_cap_mb,
               bool find_unused_parameters = false, std::set<const void*> local = {});
  ~DataParallel();

  // Makes every rank's parameters and buffers equal to rank 0's; checks that the models match.
  absl::Status SyncModuleStates();
  // Call before the backward of `loss` when it must reduce gradients; skipped for micro-steps.
  // Without find_unused_parameters, a model whose previous step left parameters out is refused
  // here in one line naming them.
  absl::Status PrepareSyncedBackward(const torch::Tensor& loss);
  // Buffers (BatchNorm statistics) from rank 0 before each forward, as DDP's broadcast_buffers.
  absl::Status BroadcastBuffers();

  ProcessGroup& group() { return *group_; }
  size_t num_buckets() const { return num_buckets_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  torch::nn::Module& module_;
  std::unique_ptr<c10d::Reducer> reducer_;
  std::set<const void*> local_;
  std::vector<std::string> names_;  // the reduced parameters' names, in the reducer's order
  size_t num_buckets_ = 0;
};

}  // namespace kiln::distributed
