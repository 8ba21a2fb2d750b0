#include "lib/run/internal/local_workers.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/exit_code.h"
#include "lib/base/stop_signals.h"
#include "lib/logging/logger.h"
#include "lib/run/environment.h"
#include "lib/run/internal/spawn.h"

namespace kiln::run {
namespace {

// Binds a TCP socket on the loopback address to `port` (0: any) and closes it: the port bound, or
// -1 where it is taken.
int BindAndClose(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return rc == 0 ? static_cast<int>(ntohs(addr.sin_port)) : -1;
}

// A TCP port nobody listens on right now, for rank 0's rendezvous store. Drawn below the kernel's
// ephemeral range (ip_local_port_range), which the source ports of outgoing connections come from:
// a port bind(0) gives lies in that range, and another job's connection can take it before rank 0
// listens on it (EADDRINUSE, seen in CI with tests in parallel). bind(0) where the range cannot be
// read or leaves no room below it.
absl::StatusOr<int> FreePort() {
  int low = 0, high = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  constexpr int kLowest = 10000;
  if (range >> low >> high && low > kLowest + 1000) {
    std::mt19937 draw(std::random_device{}());
    std::uniform_int_distribution<int> port(kLowest, low - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int bound = BindAndClose(port(draw));
      if (bound > 0) return bound;
    }
  }
  const int bound = BindAndClose(0);
  if (bound < 0)
    return absl::InternalError(absl::StrCat("finding a free port: ", std::strerror(errno)));
  return bound;
}

}  // namespace

absl::StatusOr<int> NodeRank(int num_nodes) {
  using run::ProcessEnv;
  if (num_nodes <= 1) return 0;
  std::string node = ProcessEnv("NODE_RANK");
  if (node.empty() || ProcessEnv("MASTER_ADDR").empty() || ProcessEnv("MASTER_PORT").empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer.num_nodes=", num_nodes,
                     ": start kiln on every node with NODE_RANK (0..", num_nodes - 1,
                     "), MASTER_ADDR and MASTER_PORT (node 0's address and a free port) set, or "
                     "use torchrun or SLURM"));
  }
  int node_rank = 0;
  if (!absl::SimpleAtoi(node, &node_rank) || node_rank < 0 || node_rank >= num_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("NODE_RANK='", node, "' is not in 0..", num_nodes - 1));
  }
  return node_rank;
}

absl::Status RunLocalWorkers(const LocalWorkersOptions& options) {
  using run::ProcessEnv;
  auto node_rank_or = NodeRank(options.num_nodes);
  if (!node_rank_or.ok()) return node_rank_or.status();
  int node_rank = *node_rank_or;
  std::string master_addr = ProcessEnv("MASTER_ADDR");
  std::string port_text = ProcessEnv("MASTER_PORT");
  if (master_addr.empty()) master_addr = "127.0.0.1";
  int port = 0;
  if (port_text.empty()) {
    auto free_port = FreePort();
    if (!free_port.ok()) return free_port.status();
    port = *free_port;
  } else if (!absl::SimpleAtoi(port_text, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT='", port_text, "' is not a port number"));
  }
  int world = options.devices * options.num_nodes;
  Logger::Instance().Info(absl::StrCat("starting ", options.devices, " workers (ranks ",
                                       node_rank * options.devices, "..",
                                       (node_rank + 1) * options.devices - 1, " of ", world,
                                       "), rendezvous at ", master_addr, ":", port));

  // Signals for the workers (SIGTERM from a scheduler, SIGUSR1 before preemption) are passed on,
  // each one as it arrives.
  StopSignals stop_signals;
  uint64_t signals_forwarded = StopSignals::Count();

  std::map<pid_t, int> running;  // pid -> global rank
  absl::Status status;
  for (int local = 0; local < options.devices && status.ok(); ++local) {
    int rank = node_rank * options.devices + local;
    SpawnOptions spawn;
    spawn.env = {{"RANK", std::to_string(rank)},
                 {"LOCAL_RANK", std::to_string(local)},
                 {"WORLD_SIZE", std::to_string(world)},
                 {"LOCAL_WORLD_SIZE", std::to_string(options.devices)},
                 {"GROUP_RANK", std::to_string(node_rank)},
                 {"MASTER_ADDR", master_addr},
                 {"MASTER_PORT", std::to_string(port)},
                 {"KILN_LOCAL_WORKERS", "1"}};
    spawn.stop_with_parent = true;
    if (rank == 0 && !options.log_file.empty()) spawn.env["KILN_WORKER_LOG"] = options.log_file;
    if (rank != 0) spawn.output_file = absl::StrCat(options.output_dir, "/rank_", rank, ".log");
    auto pid = SpawnProcess(options.argv, spawn);
    if (!pid.ok()) {
      status = pid.status();
      break;
    }
    running[*pid] = rank;
  }

  int first_failed_rank = -1, first_failed_status = 0;
  int rank0_status = 0;
  bool forwarded = false;
  std::chrono::steady_clock::time_point deadline;
  bool terminated = false;
  while (!running.empty()) {
    if (const uint64_t arrived = StopSignals::Count(); arrived != signals_forwarded) {
      signals_forwarded = arrived;
      forwarded = true;
      for (const auto& [pid, rank] : running) ::kill(pid, StopSignals::Received());
    }
    int wait_status = 0;
    pid_t pid = ::waitpid(-1, &wait_status, WNOHANG);
    if (pid < 0 && errno != EINTR) {
      status = absl::InternalError(absl::StrCat("waiting for workers: ", std::strerror(errno)));
      break;
    }
    if (pid <= 0) {
      auto now = std::chrono::steady_clock::now();
      if (first_failed_rank >= 0 && now > deadline) {
        // The rest did not notice the failure in time (a hung collective): stop them.
        for (const auto& [p, rank] : running) ::kill(p, terminated ? SIGKILL : SIGTERM);
        terminated = true;
        deadline = now + std::chrono::seconds(10);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    int rank = it->second;
    running.erase(it);
    bool ok = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
    if (rank == 0) rank0_status = wait_status;
    if (!ok && first_failed_rank < 0) {
      first_failed_rank = rank;
      first_failed_status = wait_status;
      deadline = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int64_t>(options.grace_seconds * 1000));
    }
  }
  if (!status.ok()) {
    for (const auto& [pid, rank] : running) ::kill(pid, SIGKILL);
    return status;
  }
  if (first_failed_rank < 0) return absl::OkStatus();
  if (forwarded && !(WIFEXITED(rank0_status) && WEXITSTATUS(rank0_status) == 0)) {
    // A signal stopped the run: every rank checkpointed (rank 0 wrote it) and rank 0 said so.
    first_failed_rank = 0;
    first_failed_status = rank0_status;
  }
  int code = ExitCodeOf(first_failed_status);
  if (first_failed_rank == 0) {
    // Rank 0 wrote its own one-line error to this terminal.
    return MarkReported(WithExitCode(absl::AbortedError("worker rank 0 failed"), code));
  }
  std::string log = absl::StrCat(options.output_dir, "/rank_", first_failed_rank, ".log");
  std::string cause = LastLineOf(log);
  const std::string prefix = "kiln: error: ";
  if (cause.rfind(prefix, 0) == 0) cause = cause.substr(prefix.size());
  return WithExitCode(
      absl::AbortedError(absl::StrCat(
          "worker rank ", first_failed_rank, " of ", world, " ", DescribeExit(first_failed_status),
          cause.empty() || !WIFEXITED(first_failed_status) ? "" : absl::StrCat(": ", cause), " (",
          log, ")")),
      code);
}

}  // namespace kiln::run
