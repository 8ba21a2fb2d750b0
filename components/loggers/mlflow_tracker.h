// One kiln run as an MLflow run: what the `mlflow` logger and `kiln mlflow-sync` send. Records
// (the run's opening with its params and tags, metrics, artifacts, the end status) go through a
// bounded queue to a thread of their own, so a server that is down, slow or answering 5xx never
// holds up a training step: the thread retries with backoff, the queue overflows into
// RUN/mlflow/pending.jsonl, and what is still unsent when the job ends stays there for
// `kiln mlflow-sync run_dir=RUN`. RUN/mlflow/run.json keeps the run's id, so a resumed fit
// (ckpt_path=last) continues the same MLflow run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "components/loggers/mlflow_client.h"
#include "nlohmann/json.hpp"

namespace kiln::mlflow {

struct TrackerOptions {
  std::string tracking_uri;
  std::string experiment_name = "kiln";
  std::string run_name;       // "": the run folder's path
  std::string run_dir;        // the kiln run folder: its .hydra/config.yaml are the params
  int64_t max_queue = 10000;  // records held in memory before they spill to the file
  double timeout = 10;        // seconds for one request
  double flush_timeout = 30;  // seconds the job's end waits for the queue to drain
  double max_backoff = 30;    // seconds between two tries, at most
  double batch_interval = 5;  // seconds between two metrics requests, at least (unless 1000 wait)
  // At the end, the best checkpoint (checkpoints/best_model_path.txt, else last.ckpt) goes too,
  // under its path in the run folder (Lightning's MLFlowLogger(log_model=True)).
  bool log_model = false;
};

class Tracker {
 public:
  // Checks the server (the experiment, created if missing) and starts the sending thread. A server
  // that does not answer is one warning, and the records wait; credentials it rejects and a URI
  // that is not an MLflow server are errors.
  static absl::StatusOr<std::unique_ptr<Tracker>> Start(const TrackerOptions& options);
  ~Tracker();

  // The fit resumes from a checkpoint: continue the MLflow run recorded in the run folder.
  void Resume();
  // Never blocks on the network.
  void LogMetrics(const std::map<std::string, double>& metrics, int64_t step);
  // Sends the run's artifacts and ends it with `status` (FINISHED, FAILED, KILLED) and `tags`,
  // waiting at most flush_timeout for the queue; what is left stays in RUN/mlflow/pending.jsonl.
  void End(const std::string& status, const std::map<std::string, std::string>& tags = {});

 private:
  friend absl::Status SyncRunFolder(const std::string& run_dir, const std::string& tracking_uri,
                                    double timeout);
  explicit Tracker(const TrackerOptions& options, Client client);
  void Enqueue(nlohmann::json record);
  void OpenIfNeeded();
  void SendLoop();
  // Sends one record (or a batch of metrics records); OK also when the server refused it for good.
  absl::Status Send(const std::deque<nlohmann::json>& batch);
  absl::Status SendOpen(const nlohmann::json& open);
  absl::Status SendArtifacts(const nlohmann::json& files);
  // Moves the in-memory queue to the end of the pending file (under mu_).
  void SpillLocked();
  // Loads up to `n` records from the pending file to the queue's front (under mu_).
  void LoadSpilledLocked(size_t n);
  void SaveRunFile();

  TrackerOptions options_;
  Client client_;
  std::string pending_path_, run_file_;
  nlohmann::json open_record_;  // the run's opening, built at the start (config, tags)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> queue_;  // newer than the pending file's unread records
  size_t file_offset_ = 0;            // the pending file's first unread byte
  bool opened_ = false, resume_ = false, ending_ = false, stop_ = false, busy_ = false;
  std::thread sender_;

  // The sending thread's own.
  std::string experiment_id_, run_id_, artifact_root_;
  std::string parent_id_;         // a sweep job's parent run
  std::string parent_sweep_dir_;  // where the sweep's parent.json is
  bool parent_ended_ = false;     // this job's end was counted
  bool parent_last_ = false;      // and it was the last running one: the parent ends
  bool warned_down_ = false, gave_up_ = false;
  int refusals_warned_ = 0;
};

// `kiln mlflow-sync`: sends what a run folder's RUN/mlflow/pending.jsonl holds (a run trained
// while the server was away) to the server its run.json names, or to `tracking_uri` when given.
absl::Status SyncRunFolder(const std::string& run_dir, const std::string& tracking_uri,
                           double timeout);

}  // namespace kiln::mlflow
