// A client of an MLflow tracking server's REST API 2.0 (experiments, runs, log-batch, the artifact
// proxy of `mlflow server --serve-artifacts`), over cpp-httplib. Credentials come from the
// environment as MLflow's own client reads them: MLFLOW_TRACKING_TOKEN (a bearer token), else
// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic auth); never from a config file.
//
// Failures say whether trying again can help: absl::Unavailable for a server that does not answer,
// answers slowly, 5xx or 429 (the mlflow logger retries those); PermissionDenied for rejected
// credentials, FailedPrecondition for a URI that is not an MLflow server, InvalidArgument for a
// request the server refused (retrying cannot help).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kiln::mlflow {

class Client {
 public:
  // `tracking_uri`: http://HOST[:PORT][/PREFIX]. `timeout_seconds` bounds connecting, each read
  // and each write of one request.
  static absl::StatusOr<Client> Create(const std::string& tracking_uri, double timeout_seconds);

  // POST /api/2.0/mlflow/`endpoint` with a JSON body; the answer's JSON.
  absl::StatusOr<nlohmann::json> Post(const std::string& endpoint, const nlohmann::json& body);
  // GET /api/2.0/mlflow/`endpoint` with query parameters.
  absl::StatusOr<nlohmann::json> Get(const std::string& endpoint,
                                     const std::map<std::string, std::string>& query);
  // PUT the bytes as the run's artifact `path` through the server's artifact proxy.
  // `artifact_root` is the run's artifact URI without its scheme ("1/RUN_ID/artifacts").
  absl::Status PutArtifact(const std::string& artifact_root, const std::string& path,
                           const std::string& bytes);

  // The experiment's id, creating the experiment when there is none of that name.
  absl::StatusOr<std::string> ExperimentId(const std::string& name);

  const std::string& uri() const { return uri_; }

 private:
  Client() = default;

  std::string uri_;
  std::string origin_;  // scheme://host:port
  std::string prefix_;  // a path the server is mounted under ("" or "/mlflow")
  double timeout_ = 10;
  std::string token_, user_, password_;  // from the environment; "" when unset
};

// A run's artifact URI as PutArtifact takes it ("mlflow-artifacts:/1/ID/artifacts" ->
// "1/ID/artifacts"); "" for a URI the artifact proxy does not serve (a server started without
// --serve-artifacts stores them where kiln cannot write).
std::string ProxiedArtifactRoot(const std::string& artifact_uri);

// MLflow's run statuses for how a job ended: FINISHED for OK, KILLED for a stop signal (a status
// carrying exit code 128 + N) or an Optuna trial its pruner stopped (exit code 3), FAILED for
// anything else.
std::string RunStatusFor(int requested_exit_code, bool ok);

}  // namespace kiln::mlflow
