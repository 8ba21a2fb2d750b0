// `trainer.devices=N` (and `trainer.num_nodes=M`): kiln starts the N worker processes of this
// node itself, as torchrun would, with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// set, and waits for them. The config is composed once, here; the workers run in this run's
// directory. Rank 0 writes the job's log; rank k>0 writes `rank_k.log` there. When a worker fails
// the others are given a grace period to stop on their own, then terminated.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::run {

struct LocalWorkersOptions {
  int devices = 1;  // workers on this node
  int num_nodes = 1;
  std::vector<std::string> argv;  // the command line each worker runs (kiln ... --worker-of=DIR)
  std::string output_dir;         // the run directory
  std::string log_file;           // the job's log, written by rank 0
  double grace_seconds = 30;      // after the first failure, before the rest are terminated
};

// This node's rank among `num_nodes` (NODE_RANK), checking that MASTER_ADDR and MASTER_PORT are
// set when there are several nodes; 0 for one node.
absl::StatusOr<int> NodeRank(int num_nodes);

// Returns OK when every worker succeeded. Otherwise an error naming the first worker that failed
// (its exit code carried as the status's exit code); when that was rank 0, which has already
// reported its error, the status is marked as reported.
absl::Status RunLocalWorkers(const LocalWorkersOptions& options);

}  // namespace kiln::run
