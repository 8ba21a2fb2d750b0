// The thread behind a stream's epoch (EpochSource): one reader thread runs ReadAll, reading ahead
// of the loader's threads as far as the derived class lets it, and the epoch ends by cancelling
// and joining it. The derived class calls Start() last in its constructor and Stop() first in its
// destructor (the thread uses its members); it guards its state with mu_, waits for room on
// room_ (waking when cancelled_), and wakes the loader's threads on arrived_.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "lib/data/dataset.h"

namespace kiln::data::shards {

class ReadAheadSource : public EpochSource {
 protected:
  void Start() {
    thread_ = std::thread([this] {
      absl::Status status = ReadAll();
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      finished_ = true;
      arrived_.notify_all();
    });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    room_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Reads the epoch; returns early (OK) once cancelled_ is set.
  virtual absl::Status ReadAll() = 0;

  std::mutex mu_;
  std::condition_variable room_, arrived_;
  bool cancelled_ = false, finished_ = false;  // under mu_
  absl::Status status_;                        // ReadAll's, once finished_

 private:
  std::thread thread_;
};

}  // namespace kiln::data::shards
