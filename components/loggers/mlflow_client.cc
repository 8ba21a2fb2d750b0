#include "components/loggers/mlflow_client.h"

#include <httplib.h>

#include <cmath>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/sweep/trial_channel.h"

namespace kiln::mlflow {
namespace {

constexpr char kApi[] = "/api/2.0/mlflow/";
constexpr char kArtifactsApi[] = "/api/2.0/mlflow-artifacts/artifacts/";

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// One line of the server's answer for an error message: MLflow's {"message": ...} when it sent
// one, else the start of the body.
std::string ServerMessage(const std::string& body) {
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("message") && json["message"].is_string())
    return json["message"].get<std::string>();
  std::string line = body.substr(0, body.find('\n'));
  return line.size() > 120 ? line.substr(0, 120) + "..." : line;
}

}  // namespace

std::string ProxiedArtifactRoot(const std::string& artifact_uri) {
  constexpr char kProxied[] = "mlflow-artifacts:/";
  if (!absl::StartsWith(artifact_uri, kProxied)) return "";
  std::string root = artifact_uri.substr(sizeof(kProxied) - 1);
  while (!root.empty() && root.front() == '/') root.erase(0, 1);
  return root;
}

std::string RunStatusFor(int requested_exit_code, bool ok) {
  if (requested_exit_code > 128 || requested_exit_code == sweep::kExitTrialPruned) return "KILLED";
  return ok ? "FINISHED" : "FAILED";
}

absl::StatusOr<Client> Client::Create(const std::string& tracking_uri, double timeout_seconds) {
  Client client;
  client.uri_ = tracking_uri;
  while (!client.uri_.empty() && client.uri_.back() == '/') client.uri_.pop_back();
  size_t scheme = client.uri_.find("://");
  if (scheme == std::string::npos || (client.uri_.compare(0, scheme, "http") != 0 &&
                                      client.uri_.compare(0, scheme, "https") != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("logger.mlflow.tracking_uri must be http://HOST:PORT (an MLflow tracking "
                     "server), got '",
                     tracking_uri, "'"));
  }
  size_t path = client.uri_.find('/', scheme + 3);
  client.origin_ = client.uri_.substr(0, path);
  client.prefix_ = path == std::string::npos ? "" : client.uri_.substr(path);
  client.timeout_ = timeout_seconds;
  client.token_ = Env("MLFLOW_TRACKING_TOKEN");
  client.user_ = Env("MLFLOW_TRACKING_USERNAME");
  client.password_ = Env("MLFLOW_TRACKING_PASSWORD");
  return client;
}

namespace {

void Configure(httplib::Client& http, double timeout, const std::string& token,
               const std::string& user, const std::string& password) {
  if (!token.empty()) {
    http.set_bearer_token_auth(token);
  } else if (!user.empty()) {
    http.set_basic_auth(user, password);
  }
  auto seconds = static_cast<time_t>(timeout);
  auto micros = static_cast<time_t>((timeout - std::floor(timeout)) * 1e6);
  http.set_connection_timeout(seconds, micros);
  http.set_read_timeout(seconds, micros);
  http.set_write_timeout(seconds, micros);
}

absl::StatusOr<nlohmann::json> Answer(const std::string& uri, const std::string& what,
                                      const httplib::Result& result) {
  if (!result) {
    return absl::UnavailableError(absl::StrCat("the MLflow server at ", uri, " does not answer (",
                                               httplib::to_string(result.error()), ")"));
  }
  int code = result->status;
  const std::string& body = result->body;
  if (code >= 500 || code == 429 || code == 408) {
    return absl::UnavailableError(absl::StrCat("the MLflow server at ", uri, " answered HTTP ",
                                               code, " to ", what, ": ", ServerMessage(body)));
  }
  if (code == 401 || code == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the MLflow server at ", uri, " refused the credentials (HTTP ", code, " to ", what,
        "): set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"));
  }
  auto json = nlohmann::json::parse(body.empty() ? "{}" : body, nullptr,
                                    /*allow_exceptions=*/false);
  if (code == 404 || code == 405 || json.is_discarded() || !json.is_object()) {
    if (json.is_object() && json.contains("error_code")) {
      return absl::NotFoundError(absl::StrCat("MLflow at ", uri, ": ", ServerMessage(body)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(uri, " is not an MLflow tracking server (HTTP ", code, " to ", what, ")"));
  }
  if (code >= 300) {
    return absl::InvalidArgumentError(
        absl::StrCat("the MLflow server at ", uri, " refused ", what, ": ", ServerMessage(body)));
  }
  return json;
}

}  // namespace

absl::StatusOr<nlohmann::json> Client::Post(const std::string& endpoint,
                                            const nlohmann::json& body) {
  httplib::Client http(origin_);
  Configure(http, timeout_, token_, user_, password_);
  httplib::Headers headers;
  return Answer(
      uri_, endpoint,
      http.Post((prefix_ + kApi + endpoint).c_str(), headers, body.dump(), "application/json"));
}

absl::StatusOr<nlohmann::json> Client::Get(const std::string& endpoint,
                                           const std::map<std::string, std::string>& query) {
  httplib::Client http(origin_);
  Configure(http, timeout_, token_, user_, password_);
  httplib::Headers headers;
  httplib::Params params(query.begin(), query.end());
  return Answer(uri_, endpoint, http.Get((prefix_ + kApi + endpoint).c_str(), params, headers));
}

absl::Status Client::PutArtifact(const std::string& artifact_root, const std::string& path,
                                 const std::string& bytes) {
  httplib::Client http(origin_);
  Configure(http, timeout_, token_, user_, password_);
  httplib::Headers headers;
  std::string target = prefix_ + kArtifactsApi + artifact_root + "/" + path;
  return Answer(uri_, "the artifact " + path,
                http.Put(target.c_str(), headers, bytes, "application/octet-stream"))
      .status();
}

absl::StatusOr<std::string> Client::ExperimentId(const std::string& name) {
  auto found = Get("experiments/get-by-name", {{"experiment_name", name}});
  if (found.ok()) {
    const auto& experiment = (*found)["experiment"];
    if (experiment.value("lifecycle_stage", "active") == "deleted") {
      return absl::FailedPreconditionError(
          absl::StrCat("the MLflow experiment '", name, "' at ", uri_,
                       " is deleted: restore it (mlflow experiments restore) or choose another "
                       "logger.mlflow.experiment_name"));
    }
    return experiment.value("experiment_id", "");
  }
  if (!absl::IsNotFound(found.status())) return found.status();
  auto created = Post("experiments/create", {{"name", name}});
  if (!created.ok()) {
    // Another process may have created it in between.
    auto again = Get("experiments/get-by-name", {{"experiment_name", name}});
    if (again.ok()) return (*again)["experiment"].value("experiment_id", "");
    return created.status();
  }
  return created->value("experiment_id", "");
}

}  // namespace kiln::mlflow
