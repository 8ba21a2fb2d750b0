#include "components/loggers/mlflow_tracker.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/files.h"
#include "lib/config/merge.h"
#include "lib/config/node.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"

namespace kiln::mlflow {
namespace {

// MLflow's limits (mlflow/utils/validation.py of the pinned server, 3.17).
constexpr size_t kMaxKeyLength = 250;
constexpr size_t kMaxParamValueLength = 6000;
constexpr size_t kMaxTagValueLength = 8000;
constexpr size_t kParamsPerBatch = 100;
constexpr size_t kMetricsPerBatch = 1000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// MLflow takes names of letters, digits, '_', '-', '.', ' ', ':' and '/'; anything else becomes
// '_'.
std::string MlflowName(const std::string& name) {
  std::string out = name.substr(0, kMaxKeyLength);
  for (char& c : out) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
              c == ' ' || c == ':' || c == '/';
    if (!ok) c = '_';
  }
  return out;
}

nlohmann::ordered_json NodeJson(const config::Node& node) {
  switch (node.kind()) {
    case config::NodeKind::kNull: return nullptr;
    case config::NodeKind::kBool: return node.as_bool();
    case config::NodeKind::kInt:
      if (node.is_big_int()) return node.int_text();
      return node.as_int();
    case config::NodeKind::kFloat: return node.as_float();
    case config::NodeKind::kString: return node.as_string();
    case config::NodeKind::kList: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& item : node.items()) out.push_back(NodeJson(*item));
      return out;
    }
    case config::NodeKind::kMap: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [key, value] : node.entries()) out[key] = NodeJson(*value);
      return out;
    }
  }
  return nullptr;
}

// A scalar as Python's str() writes what yaml.safe_load reads (Lightning's MLFlowLogger logs
// str(value)); lists and empty mappings as compact JSON.
std::string ParamText(const config::Node& node) {
  switch (node.kind()) {
    case config::NodeKind::kNull: return "None";
    case config::NodeKind::kBool: return node.as_bool() ? "True" : "False";
    case config::NodeKind::kInt:
      return node.is_big_int() ? node.int_text() : std::to_string(node.as_int());
    case config::NodeKind::kFloat: return config::PythonFloatRepr(node.as_float());
    case config::NodeKind::kString: return node.as_string();
    default: return NodeJson(node).dump();
  }
}

void Flatten(const config::Node& node, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>* out) {
  if (node.is_map() && node.size() > 0) {
    for (const auto& [key, value] : node.entries())
      Flatten(*value, prefix.empty() ? key : prefix + "." + key, out);
    return;
  }
  out->emplace_back(prefix, ParamText(node));
}

std::string CommandOutput(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    ::pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string ShellQuoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-.,/=:@+%") == std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string arg;
  for (char c : all) {
    if (c == '\0') {
      args.push_back(ShellQuoted(arg));
      arg.clear();
    } else {
      arg += c;
    }
  }
  return absl::StrJoin(args, " ");
}

std::string UserName() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user) return user;
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr) return pw->pw_name;
  return "unknown";
}

std::string HostName() {
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

nlohmann::json KeyValues(const std::vector<std::pair<std::string, std::string>>& pairs,
                         size_t max_value) {
  auto out = nlohmann::json::array();
  for (const auto& [k, v] : pairs) out.push_back({{"key", k}, {"value", v.substr(0, max_value)}});
  return out;
}

nlohmann::json MetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

bool Retryable(const absl::Status& status) { return absl::IsUnavailable(status); }

// The run's opening: its name, start time, tags, and the composed config as params; values too
// long for MLflow are written beside (RUN/mlflow/params/KEY.txt) and sent as artifacts.
nlohmann::json OpenRecord(const TrackerOptions& options) {
  std::vector<std::pair<std::string, std::string>> params;
  auto config = config::LoadYamlFile(options.run_dir + "/.hydra/config.yaml");
  if (config.ok()) Flatten(**config, "", &params);
  auto long_values = nlohmann::json::array();
  for (auto& [key, value] : params) {
    key = MlflowName(key);
    if (value.size() <= kMaxParamValueLength) continue;
    std::string file = "mlflow/params/" + key + ".txt";
    if (MakeDirs(options.run_dir + "/mlflow/params").ok() &&
        WriteFileAtomically(options.run_dir + "/" + file, value).ok()) {
      long_values.push_back({file, "params/" + key + ".txt"});
      value = value.substr(0, 200) + "... (the whole value: artifact params/" + key + ".txt)";
    }
  }
  std::string run_name = options.run_name.empty() ? options.run_dir : options.run_name;
  std::vector<std::pair<std::string, std::string>> tags = {
      {"mlflow.runName", run_name},     {"mlflow.source.name", run::ExecutablePath()},
      {"mlflow.source.type", "LOCAL"},  {"mlflow.user", UserName()},
      {"kiln.version", run::Version()}, {"kiln.command_line", CommandLine()},
      {"kiln.host", HostName()},        {"kiln.run_dir", AbsolutePath(options.run_dir)},
  };
  std::string commit = CommandOutput("git rev-parse HEAD 2>/dev/null");
  if (commit.size() == 40) tags.emplace_back("mlflow.source.git.commit", commit);
  // A job of a sweep (hydra.mode MULTIRUN) is a nested run of the sweep's parent run; the sweep's
  // folder is the one its jobs' folders are in (hydra.sweep.subdir: the job's number).
  std::string sweep_dir;
  auto hydra = config::LoadYamlFile(options.run_dir + "/.hydra/hydra.yaml");
  if (hydra.ok()) {
    config::NodePtr mode = config::SelectPath(*hydra, {"hydra", "mode"});
    config::NodePtr num = config::SelectPath(*hydra, {"hydra", "job", "num"});
    if (mode && mode->kind() == config::NodeKind::kString && mode->as_string() == "MULTIRUN") {
      std::string dir = AbsolutePath(options.run_dir);
      while (!dir.empty() && dir.back() == '/') dir.pop_back();
      sweep_dir = dir.substr(0, dir.find_last_of('/'));
      if (num && num->kind() == config::NodeKind::kInt)
        tags.emplace_back("kiln.sweep_job", std::to_string(num->as_int()));
    }
  }
  return {{"open",
           {{"run_name", run_name},
            {"start_time", NowMs()},
            {"tags", KeyValues(tags, kMaxTagValueLength)},
            {"params", KeyValues(params, kMaxParamValueLength)},
            {"long_values", long_values},
            {"sweep_dir", sweep_dir}}}};
}

// A lock on SWEEP/mlflow/parent.lock for as long as it lives: a sweep's jobs may start and end
// together.
class ParentLock {
 public:
  explicit ParentLock(const std::string& sweep_dir)
      : fd_(::open((sweep_dir + "/mlflow/parent.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC,
                   0644)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~ParentLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  ParentLock(const ParentLock&) = delete;
  ParentLock& operator=(const ParentLock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// The sweep's parent run: created by the first of its jobs to get here, its id kept in
// SWEEP/mlflow/parent.json for the others, with the count of its jobs that are running: the
// parent is RUNNING while one is, FINISHED when the last one ends (ParentJobEnded).
absl::StatusOr<std::string> ParentRun(Client& client, const std::string& experiment_id,
                                      const std::string& sweep_dir) {
  KILN_RETURN_IF_ERROR(MakeDirs(sweep_dir + "/mlflow"));
  ParentLock lock(sweep_dir);
  if (!lock.ok()) return absl::InternalError(absl::StrCat("cannot lock ", sweep_dir, "/mlflow"));
  std::string file = sweep_dir + "/mlflow/parent.json";
  auto known = nlohmann::json::parse(ReadFileToString(file).value_or(""), nullptr, false);
  if (known.is_object() && known.value("tracking_uri", "") == client.uri() &&
      known.value("experiment_id", "") == experiment_id) {
    const int64_t running = known.value("jobs_running", int64_t{0});
    if (running <= 0) {
      // A job after the others ended (a sweep's jobs one after another): running again.
      KILN_RETURN_IF_ERROR(
          client.Post("runs/update", {{"run_id", known.value("run_id", "")}, {"status", "RUNNING"}})
              .status());
    }
    known["jobs_running"] = std::max<int64_t>(running, 0) + 1;
    KILN_RETURN_IF_ERROR(WriteFileAtomically(file, known.dump(2) + "\n"));
    return known.value("run_id", "");
  }
  std::vector<std::pair<std::string, std::string>> tags = {
      {"mlflow.runName", sweep_dir},    {"mlflow.source.name", run::ExecutablePath()},
      {"mlflow.source.type", "LOCAL"},  {"mlflow.user", UserName()},
      {"kiln.version", run::Version()}, {"kiln.host", HostName()},
      {"kiln.sweep_dir", sweep_dir},
  };
  KILN_ASSIGN_OR_RETURN(
      auto created, client.Post("runs/create", {{"experiment_id", experiment_id},
                                                {"run_name", sweep_dir},
                                                {"start_time", NowMs()},
                                                {"tags", KeyValues(tags, kMaxTagValueLength)}}));
  std::string id = created["run"]["info"].value("run_id", "");
  nlohmann::json record = {{"tracking_uri", client.uri()},
                           {"experiment_id", experiment_id},
                           {"run_id", id},
                           {"jobs_running", 1}};
  KILN_RETURN_IF_ERROR(WriteFileAtomically(file, record.dump(2) + "\n"));
  return id;
}

// One job of the sweep ended: true when it was the last one running.
bool ParentJobEnded(const std::string& sweep_dir) {
  ParentLock lock(sweep_dir);
  std::string file = sweep_dir + "/mlflow/parent.json";
  auto known = nlohmann::json::parse(ReadFileToString(file).value_or(""), nullptr, false);
  if (!lock.ok() || !known.is_object()) return true;
  const int64_t running = std::max<int64_t>(known.value("jobs_running", int64_t{1}) - 1, 0);
  known["jobs_running"] = running;
  (void)WriteFileAtomically(file, known.dump(2) + "\n");
  return running == 0;
}

}  // namespace

Tracker::Tracker(const TrackerOptions& options, Client client)
    : options_(options),
      client_(std::move(client)),
      pending_path_(options.run_dir + "/mlflow/pending.jsonl"),
      run_file_(options.run_dir + "/mlflow/run.json") {}

absl::StatusOr<std::unique_ptr<Tracker>> Tracker::Start(const TrackerOptions& options) {
  KILN_ASSIGN_OR_RETURN(Client client, Client::Create(options.tracking_uri, options.timeout));
  std::unique_ptr<Tracker> tracker(new Tracker(options, std::move(client)));
  KILN_RETURN_IF_ERROR(MakeDirs(options.run_dir + "/mlflow"));
  // What an earlier process of this run folder left unsent goes first.
  if (IsRegularFile(tracker->pending_path_)) {
    Logger::Instance().Info(absl::StrCat("mlflow: sending what ", tracker->pending_path_,
                                         " holds from an earlier process first"));
  }
  auto id = tracker->client_.ExperimentId(options.experiment_name);
  if (id.ok()) {
    tracker->experiment_id_ = *id;
  } else if (Retryable(id.status())) {
    tracker->warned_down_ = true;
    Logger::Instance().Warning(
        absl::StrCat("mlflow: ", id.status().message(), "; training goes on, its records wait in ",
                     tracker->pending_path_,
                     " and are sent when the server answers (or by kiln mlflow-sync "
                     "run_dir=",
                     options.run_dir, ")"));
  } else {
    return absl::FailedPreconditionError(absl::StrCat("logger mlflow: ", id.status().message()));
  }
  tracker->open_record_ = OpenRecord(options);
  tracker->sender_ = std::thread([t = tracker.get()] { t->SendLoop(); });
  return tracker;
}

Tracker::~Tracker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  // Nothing logged is lost: a tracker that was not ended keeps its records for kiln mlflow-sync.
  std::lock_guard<std::mutex> lock(mu_);
  SpillLocked();
}

void Tracker::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  resume_ = true;
}

void Tracker::OpenIfNeeded() {
  if (opened_) return;
  opened_ = true;
  open_record_["open"]["resume"] = resume_;
  queue_.push_back(std::move(open_record_));
}

void Tracker::Enqueue(nlohmann::json record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    OpenIfNeeded();
    queue_.push_back(std::move(record));
    if (static_cast<int64_t>(queue_.size()) > options_.max_queue) SpillLocked();
  }
  cv_.notify_all();
}

void Tracker::LogMetrics(const std::map<std::string, double>& metrics, int64_t step) {
  int64_t now = NowMs();
  auto values = nlohmann::json::array();
  for (const auto& [key, value] : metrics) {
    values.push_back({{"key", MlflowName(key)},
                      {"value", MetricValue(value)},
                      {"timestamp", now},
                      {"step", step}});
  }
  Enqueue({{"metrics", std::move(values)}});
}

namespace {
// The run's best checkpoint (the one model_checkpoint recorded in checkpoints/best_model_path.txt,
// else checkpoints/last.ckpt) as paths under the run folder: the file, or a sharded checkpoint's
// files. Nothing when it is outside the run folder or missing.
std::vector<std::string> ModelCheckpointFiles(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root = fs::weakly_canonical(run_dir, error);
  std::string chosen = run_dir + "/checkpoints/last.ckpt";
  if (auto recorded = ReadFileToString(run_dir + "/checkpoints/best_model_path.txt");
      recorded.ok()) {
    std::string best = recorded->substr(0, recorded->find('\n'));
    if (!best.empty()) chosen = best;
  }
  const fs::path checkpoint = fs::weakly_canonical(chosen, error);
  std::vector<fs::path> found;
  if (fs::is_regular_file(checkpoint, error)) {
    found.push_back(checkpoint);
  } else if (fs::is_directory(checkpoint, error)) {
    for (const auto& entry : fs::recursive_directory_iterator(checkpoint, error)) {
      if (entry.is_regular_file()) found.push_back(entry.path());
    }
  }
  std::vector<std::string> names;
  for (const fs::path& file : found) {
    std::string relative = file.lexically_relative(root).string();
    if (relative.empty() || relative.rfind("..", 0) == 0) continue;
    names.push_back(relative);
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    Logger::Instance().Warning(
        absl::StrCat("mlflow: log_model: no checkpoint of this run to send (", chosen,
                     " is not in ", run_dir, ")"));
  }
  return names;
}
}  // namespace

void Tracker::End(const std::string& status, const std::map<std::string, std::string>& tags) {
  bool logged_nothing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    logged_nothing = !opened_ && !resume_ && status == "FINISHED";
  }
  if (logged_nothing) {
    // A job that logged nothing and ended well (kiln export, kiln predict) makes no MLflow run;
    // what an earlier process of this folder left is sent, or stays for kiln mlflow-sync.
    std::unique_lock<std::mutex> lock(mu_);
    ending_ = true;
    cv_.notify_all();
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(options_.flush_timeout * 1000));
    cv_.wait_until(lock, deadline, [&] {
      return (queue_.empty() && !busy_ && !IsRegularFile(pending_path_)) || gave_up_;
    });
    return;
  }
  auto files = nlohmann::json::array();
  for (const std::string name : {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml",
                                 "test_metrics.yaml", "val_metrics.yaml", "report.html"}) {
    if (IsRegularFile(options_.run_dir + "/" + name)) files.push_back({name, name});
  }
  if (options_.log_model) {
    for (const std::string& name : ModelCheckpointFiles(options_.run_dir))
      files.push_back({name, name});
  }
  Enqueue({{"artifacts", files}});
  Enqueue({{"end", {{"status", status}, {"end_time", NowMs()}, {"tags", tags}}}});
  std::unique_lock<std::mutex> lock(mu_);
  ending_ = true;
  cv_.notify_all();
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(options_.flush_timeout * 1000));
  auto drained = [&] {
    return queue_.empty() && !busy_ && (file_offset_ == 0 && !IsRegularFile(pending_path_));
  };
  cv_.wait_until(lock, deadline, [&] { return drained() || gave_up_; });
  stop_ = true;
  lock.unlock();
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  lock.lock();
  if (queue_.empty() && !IsRegularFile(pending_path_)) return;
  SpillLocked();
  Logger::Instance().Warning(absl::StrCat(
      "mlflow: the run's last records were not sent to ", client_.uri(), "; they wait in ",
      pending_path_, ": kiln mlflow-sync run_dir=", options_.run_dir, " sends them"));
}

void Tracker::SpillLocked() {
  if (queue_.empty()) return;
  std::string text;
  for (const auto& record : queue_) text += record.dump() + "\n";
  std::ofstream out(pending_path_, std::ios::app | std::ios::binary);
  out << text;
  out.flush();
  if (!out) {
    Logger::Instance().Warning(
        absl::StrCat("mlflow: cannot write ", pending_path_, "; records are kept in memory"));
    return;
  }
  queue_.clear();
}

void Tracker::LoadSpilledLocked(size_t n) {
  std::ifstream in(pending_path_, std::ios::binary);
  if (!in) return;
  in.seekg(static_cast<std::streamoff>(file_offset_));
  std::deque<nlohmann::json> loaded;
  std::string line;
  while (loaded.size() < n && std::getline(in, line)) {
    file_offset_ += line.size() + 1;
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object()) loaded.push_back(std::move(record));
  }
  if (!std::getline(in, line)) {
    // Everything read: the file starts afresh.
    in.close();
    std::remove(pending_path_.c_str());
    file_offset_ = 0;
  }
  queue_.insert(queue_.begin(), loaded.begin(), loaded.end());
}

void Tracker::SaveRunFile() {
  nlohmann::json run = {{"tracking_uri", client_.uri()},
                        {"experiment_name", options_.experiment_name},
                        {"experiment_id", experiment_id_},
                        {"run_id", run_id_},
                        {"artifact_root", artifact_root_}};
  auto st = WriteFileAtomically(run_file_, run.dump(2) + "\n");
  if (!st.ok()) Logger::Instance().Warning(absl::StrCat("mlflow: ", st.message()));
}

void Tracker::SendLoop() {
  double backoff = 0.5;
  const auto batch_interval =
      std::chrono::milliseconds(static_cast<int64_t>(options_.batch_interval * 1000));
  auto last_metrics_sent = std::chrono::steady_clock::now() - batch_interval;
  std::deque<nlohmann::json> batch;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (batch.empty()) {
        busy_ = false;
        cv_.notify_all();
        cv_.wait(lock, [&] {
          return stop_ || !queue_.empty() || IsRegularFile(pending_path_) || gave_up_;
        });
        if (stop_ || gave_up_) return;
        // Metrics go at most once per batch_interval (unless a full batch waits, or the job is
        // ending): a run logging every step costs the server a request a second, not one a step.
        // (The wait may end with the queue empty and records only in the pending file.)
        if (!queue_.empty() && queue_.front().contains("metrics") && !ending_) {
          cv_.wait_until(lock, last_metrics_sent + batch_interval,
                         [&] { return stop_ || ending_ || queue_.size() >= kMetricsPerBatch; });
          if (stop_) return;
        }
        if (IsRegularFile(pending_path_))
          LoadSpilledLocked(static_cast<size_t>(options_.max_queue));
        if (queue_.empty()) continue;
        // One record, or consecutive metrics records up to MLflow's batch limit.
        size_t values = 0;
        while (!queue_.empty()) {
          const auto& next = queue_.front();
          bool metrics = next.contains("metrics");
          if (!batch.empty() && (!metrics || !batch.front().contains("metrics"))) break;
          size_t n = metrics ? next["metrics"].size() : 0;
          if (!batch.empty() && values + n > kMetricsPerBatch) break;
          values += n;
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
          if (!metrics) break;
        }
        busy_ = true;
      }
    }
    absl::Status sent = Send(batch);
    if (sent.ok() || !Retryable(sent)) {
      if (!sent.ok()) {
        // The run could not be opened for good (rejected credentials, not MLflow): nothing more
        // can be sent; what is queued stays in the pending file.
        std::lock_guard<std::mutex> lock(mu_);
        queue_.insert(queue_.begin(), batch.begin(), batch.end());
        gave_up_ = true;
        cv_.notify_all();
        Logger::Instance().Warning(absl::StrCat("mlflow: ", sent.message(),
                                                "; the run's records wait in ", pending_path_,
                                                " for kiln mlflow-sync"));
        return;
      }
      if (warned_down_) {
        warned_down_ = false;
        Logger::Instance().Info(absl::StrCat("mlflow: the server at ", client_.uri(),
                                             " answers again; sending what waited"));
      }
      if (batch.front().contains("metrics")) last_metrics_sent = std::chrono::steady_clock::now();
      batch.clear();
      backoff = 0.5;
      continue;
    }
    if (!warned_down_) {
      warned_down_ = true;
      Logger::Instance().Warning(
          absl::StrCat("mlflow: ", sent.message(),
                       "; training goes on, records wait and are retried (kiln "
                       "mlflow-sync run_dir=",
                       options_.run_dir, " sends what is left at the end)"));
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000)),
                     [&] { return stop_; })) {
      queue_.insert(queue_.begin(), batch.begin(), batch.end());
      return;
    }
    // Once the job is waiting for the last records, tries come every few seconds.
    backoff =
        std::min(backoff * 2, ending_ ? std::min(2.0, options_.max_backoff) : options_.max_backoff);
  }
}

absl::Status Tracker::Send(const std::deque<nlohmann::json>& batch) {
  const nlohmann::json& first = batch.front();
  if (first.contains("open")) return SendOpen(first["open"]);
  if (run_id_.empty()) {
    return absl::FailedPreconditionError("records came before the run's opening");
  }
  absl::Status st;
  if (first.contains("metrics")) {
    auto metrics = nlohmann::json::array();
    for (const auto& record : batch)
      for (const auto& m : record["metrics"]) metrics.push_back(m);
    st = client_.Post("runs/log-batch", {{"run_id", run_id_}, {"metrics", metrics}}).status();
  } else if (first.contains("artifacts")) {
    st = SendArtifacts(first["artifacts"]);
  } else if (first.contains("end")) {
    nlohmann::json tags = first["end"].value("tags", nlohmann::json::object());
    for (const auto& [key, value] : tags.items()) {
      KILN_RETURN_IF_ERROR(
          client_.Post("runs/set-tag", {{"run_id", run_id_}, {"key", key}, {"value", value}})
              .status());
    }
    st = client_
             .Post("runs/update", {{"run_id", run_id_},
                                   {"status", first["end"].value("status", "FINISHED")},
                                   {"end_time", first["end"].value("end_time", NowMs())}})
             .status();
    // A sweep's parent run ends as the last of its running jobs does.
    if (st.ok() && !parent_id_.empty()) {
      if (!parent_ended_) {
        parent_ended_ = true;
        parent_last_ = ParentJobEnded(parent_sweep_dir_);
      }
      if (parent_last_)
        st = client_
                 .Post("runs/update", {{"run_id", parent_id_},
                                       {"status", "FINISHED"},
                                       {"end_time", first["end"].value("end_time", NowMs())}})
                 .status();
    }
  }
  if (st.ok() || Retryable(st) || absl::IsPermissionDenied(st)) return st;
  // The server refused this record (a value MLflow does not take): dropped, said a few times.
  if (refusals_warned_++ < 3) Logger::Instance().Warning(absl::StrCat("mlflow: ", st.message()));
  return absl::OkStatus();
}

absl::Status Tracker::SendOpen(const nlohmann::json& open) {
  if (experiment_id_.empty()) {
    KILN_ASSIGN_OR_RETURN(experiment_id_, client_.ExperimentId(options_.experiment_name));
    if (experiment_id_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(client_.uri(), " is not an MLflow tracking server (no experiment id)"));
    }
  }
  bool resume = open.value("resume", false);
  if (resume && run_id_.empty()) {
    auto run = nlohmann::json::parse(ReadFileToString(run_file_).value_or(""), nullptr, false);
    if (run.is_object() && run.value("tracking_uri", "") == client_.uri()) {
      run_id_ = run.value("run_id", "");
      artifact_root_ = run.value("artifact_root", "");
    }
  }
  if (resume && !run_id_.empty()) {
    return client_.Post("runs/update", {{"run_id", run_id_}, {"status", "RUNNING"}}).status();
  }
  nlohmann::json tags = open["tags"];
  std::string sweep_dir = open.value("sweep_dir", "");
  if (!sweep_dir.empty()) {
    // Counted once, however often the opening is tried.
    if (parent_id_.empty()) {
      KILN_ASSIGN_OR_RETURN(parent_id_, ParentRun(client_, experiment_id_, sweep_dir));
      parent_sweep_dir_ = sweep_dir;
    }
    tags.push_back({{"key", "mlflow.parentRunId"}, {"value", parent_id_}});
  }
  auto created = client_.Post("runs/create", {{"experiment_id", experiment_id_},
                                              {"run_name", open.value("run_name", "")},
                                              {"start_time", open.value("start_time", NowMs())},
                                              {"tags", tags}});
  if (!created.ok()) return created.status();
  const auto& info = (*created)["run"]["info"];
  run_id_ = info.value("run_id", "");
  artifact_root_ = info.value("artifact_uri", "");
  SaveRunFile();
  const auto& params = open["params"];
  for (size_t i = 0; i < params.size(); i += kParamsPerBatch) {
    auto chunk = nlohmann::json::array();
    for (size_t j = i; j < std::min(params.size(), i + kParamsPerBatch); ++j)
      chunk.push_back(params[j]);
    KILN_RETURN_IF_ERROR(
        client_.Post("runs/log-batch", {{"run_id", run_id_}, {"params", chunk}}).status());
  }
  if (open.contains("long_values") && !open["long_values"].empty())
    return SendArtifacts(open["long_values"]);
  return absl::OkStatus();
}

absl::Status Tracker::SendArtifacts(const nlohmann::json& files) {
  std::string root = ProxiedArtifactRoot(artifact_root_);
  if (root.empty()) {
    if (refusals_warned_++ < 3) {
      Logger::Instance().Warning(
          absl::StrCat("mlflow: the server stores this run's artifacts at ", artifact_root_,
                       ", which kiln cannot write; start it with --serve-artifacts to send them"));
    }
    return absl::OkStatus();
  }
  for (const auto& file : files) {
    std::string local = file[0].get<std::string>(), as = file[1].get<std::string>();
    auto bytes = ReadFileToString(options_.run_dir + "/" + local);
    if (!bytes.ok()) continue;
    KILN_RETURN_IF_ERROR(client_.PutArtifact(root, as, *bytes));
  }
  return absl::OkStatus();
}

absl::Status SyncRunFolder(const std::string& run_dir, const std::string& tracking_uri,
                           double timeout) {
  std::string run_file = run_dir + "/mlflow/run.json";
  std::string pending = run_dir + "/mlflow/pending.jsonl";
  if (!IsRegularFile(pending)) {
    return absl::NotFoundError(absl::StrCat(
        "kiln mlflow-sync: ", run_dir, " has nothing to send (no mlflow/pending.jsonl",
        IsRegularFile(run_file) ? ": its MLflow run is complete)" : ": it did not log to MLflow)"));
  }
  auto run = nlohmann::json::parse(ReadFileToString(run_file).value_or(""), nullptr, false);
  TrackerOptions options;
  options.run_dir = run_dir;
  options.timeout = timeout;
  options.max_backoff = 2;
  options.tracking_uri =
      tracking_uri.empty() && run.is_object() ? run.value("tracking_uri", "") : tracking_uri;
  if (options.tracking_uri.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kiln mlflow-sync: ", run_dir, "/mlflow/run.json names no server: pass tracking_uri=URI"));
  }
  // The pending file starts with the run's opening unless the run was created.
  if (run.is_object()) options.experiment_name = run.value("experiment_name", "kiln");
  KILN_ASSIGN_OR_RETURN(Client client, Client::Create(options.tracking_uri, timeout));
  KILN_ASSIGN_OR_RETURN(std::string experiment_id, client.ExperimentId(options.experiment_name));
  std::unique_ptr<Tracker> tracker(new Tracker(options, std::move(client)));
  tracker->experiment_id_ = experiment_id;
  if (run.is_object()) {
    tracker->run_id_ = run.value("run_id", "");
    tracker->artifact_root_ = run.value("artifact_root", "");
  }
  tracker->opened_ = true;  // the opening, if any, is in the file
  tracker->sender_ = std::thread([t = tracker.get()] { t->SendLoop(); });
  {
    std::unique_lock<std::mutex> lock(tracker->mu_);
    tracker->cv_.notify_all();
    tracker->cv_.wait_for(lock, std::chrono::seconds(120), [&] {
      return tracker->gave_up_ ||
             (tracker->queue_.empty() && !tracker->busy_ && !IsRegularFile(tracker->pending_path_));
    });
    tracker->stop_ = true;
  }
  tracker->cv_.notify_all();
  tracker->sender_.join();
  if (tracker->gave_up_ || IsRegularFile(pending) || !tracker->queue_.empty()) {
    std::lock_guard<std::mutex> lock(tracker->mu_);
    tracker->SpillLocked();
    return absl::FailedPreconditionError(
        absl::StrCat("kiln mlflow-sync: ", run_dir, " not sent; it stays in ", pending));
  }
  Logger::Instance().Info(absl::StrCat("mlflow-sync: ", run_dir, " sent to ", options.tracking_uri,
                                       " (run ", tracker->run_id_, ")"));
  return absl::OkStatus();
}

}  // namespace kiln::mlflow
