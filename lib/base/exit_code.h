// kiln's process exit codes. A status can carry the exit code it should end with (SIGINT -> 130,
// SIGTERM -> 143), so layers below the application decide it and the application honours it.
#pragma once

#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace kiln {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the job failed for a reason outside the user's input
inline constexpr int kExitUsage = 2;    // bad command line, config or input file

inline constexpr char kExitCodePayload[] = "kiln/exit-code";

inline absl::Status WithExitCode(absl::Status status, int exit_code) {
  status.SetPayload(kExitCodePayload, absl::Cord(std::to_string(exit_code)));
  return status;
}

inline constexpr char kReportedPayload[] = "kiln/reported";

// A failure whose one-line message was already printed (by a worker process): the application
// exits with its code without printing another line.
inline absl::Status MarkReported(absl::Status status) {
  status.SetPayload(kReportedPayload, absl::Cord("1"));
  return status;
}
inline bool IsReported(const absl::Status& status) {
  return status.GetPayload(kReportedPayload).has_value();
}

// The exit code a status asks for, or -1.
inline int RequestedExitCode(const absl::Status& status) {
  auto payload = status.GetPayload(kExitCodePayload);
  if (!payload.has_value()) return -1;
  return std::atoi(std::string(*payload).c_str());
}

}  // namespace kiln
