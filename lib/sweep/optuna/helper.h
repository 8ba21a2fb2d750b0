// The Optuna sweeper's link to Optuna: one Python process per sweep (lib/sweep/optuna/helper.py,
// embedded at build) that holds the study and answers one JSON line per request (open, ask,
// tell, report, should_prune, trials). Python starts once (about half a second); each request
// after that costs a round trip and Optuna's own storage work. If the helper dies, every later
// call fails with one line naming it, and the study keeps every trial told so far.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/node.h"

namespace kiln::sweep {

class OptunaHelper {
 public:
  ~OptunaHelper();
  // Starts `python` on the helper script; its standard error goes to `log_file`. Optuna missing
  // for that Python is one FailedPrecondition line saying how to install it.
  static absl::StatusOr<std::unique_ptr<OptunaHelper>> Start(const std::string& python,
                                                             const std::string& log_file);
  // Sends one request (a JSON object) and returns the reply; a reply {"error": ...} becomes an
  // InvalidArgument (bad input) or Internal error with its message.
  absl::StatusOr<config::NodePtr> Call(const std::string& request);
  const std::string& version() const { return version_; }
  double start_seconds() const { return start_seconds_; }

 private:
  OptunaHelper() = default;
  absl::Status Died(const std::string& doing);

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;  // read but not yet returned
  std::string python_, log_file_, version_;
  double start_seconds_ = 0;
  bool dead_ = false;
};

// A number in a reply (JSON's 1e-05 reads as a string in YAML 1.1).
double ReplyNumber(const config::Node& node);
// A field of a reply, or a null node when the reply lacks it (so a broken reply cannot crash kiln).
const config::Node& Field(const config::NodePtr& reply, const std::string& key);

}  // namespace kiln::sweep
