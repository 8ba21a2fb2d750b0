#include "lib/run/environment.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln::run {
namespace {

absl::StatusOr<int> ReadInt(const GetEnv& get, const std::string& name, int fallback, int min) {
  std::string text = get(name);
  if (text.empty()) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", text, "' is not an integer >= ", min));
  }
  return value;
}

}  // namespace

std::string ProcessEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value == nullptr ? "" : value;
}

absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  std::string first = nodelist.substr(0, end);
  if (first.empty()) return absl::InvalidArgumentError("SLURM_NODELIST is empty");
  // Each bracket "[07-09,12]" becomes its first number, leading zeros kept: "n[07-09]-g[1-2]" ->
  // "n07-g1".
  std::string host;
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i] != '[') {
      host += first[i];
      continue;
    }
    size_t close = first.find(']', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_NODELIST='", nodelist, "' has an unclosed '['"));
    }
    std::string range = first.substr(i + 1, close - i - 1);
    host += range.substr(0, range.find_first_of(",-"));
    i = close;
  }
  return host;
}

absl::StatusOr<Environment> ReadEnvironment(const GetEnv& get) {
  Environment env;
  if (!get("WORLD_SIZE").empty() || !get("RANK").empty()) {
    // kiln's own workers (trainer.devices) set the same variables and say so.
    env.source = get("KILN_LOCAL_WORKERS").empty() ? "torchrun" : "kiln";
    auto world = ReadInt(get, "WORLD_SIZE", 1, 1);
    if (!world.ok()) return world.status();
    auto rank = ReadInt(get, "RANK", 0, 0);
    if (!rank.ok()) return rank.status();
    auto local = ReadInt(get, "LOCAL_RANK", *rank, 0);
    if (!local.ok()) return local.status();
    env.world_size = *world;
    env.rank = *rank;
    env.local_rank = *local;
  } else if (!get("SLURM_NTASKS").empty() && !get("SLURM_PROCID").empty()) {
    auto world = ReadInt(get, "SLURM_NTASKS", 1, 1);
    if (!world.ok()) return world.status();
    if (*world == 1) return env;  // one task: an ordinary single-process job
    env.source = "slurm";
    auto rank = ReadInt(get, "SLURM_PROCID", 0, 0);
    if (!rank.ok()) return rank.status();
    auto local = ReadInt(get, "SLURM_LOCALID", 0, 0);
    if (!local.ok()) return local.status();
    env.world_size = *world;
    env.rank = *rank;
    env.local_rank = *local;
    if (get("MASTER_ADDR").empty()) {
      auto host = FirstSlurmHost(get("SLURM_NODELIST"));
      if (!host.ok()) return host.status();
      env.master_addr = *host;
    }
    // As Lightning does: a port derived from the job id, so jobs sharing a node do not collide.
    std::string job = get("SLURM_JOB_ID");
    int job_id = 0;
    if (job.size() > 4) job = job.substr(job.size() - 4);
    if (absl::SimpleAtoi(job, &job_id)) env.master_port = 15000 + job_id;
  } else {
    return env;
  }
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", env.rank, " is outside the world of ",
                                                   env.world_size, " processes (", env.source,
                                                   " environment)"));
  }
  if (std::string addr = get("MASTER_ADDR"); !addr.empty()) env.master_addr = addr;
  auto port = ReadInt(get, "MASTER_PORT", env.master_port, 1);
  if (!port.ok()) return port.status();
  if (*port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT=", *port, " is not a TCP port"));
  env.master_port = *port;
  return env;
}

}  // namespace kiln::run
