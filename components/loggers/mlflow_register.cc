// `kiln mlflow-register run_dir=RUN model_dir=DIR name=NAME`: what `kiln export` wrote (DIR's
// files: model.safetensors and config.yaml, model.pt and model.json, or a Hugging Face folder's)
// becomes artifacts of RUN's MLflow run under model/, and a new version of the registered model
// NAME in MLflow's model registry (created when missing), its source that folder of the run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "components/loggers/mlflow_client.h"
#include "lib/base/files.h"
#include "lib/commands/command_options.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"

namespace kiln {
namespace {

struct MlflowRegisterOptions {
  std::optional<std::string> run_dir;
  std::optional<std::string> model_dir;
  std::optional<std::string> name;
  std::optional<std::string> tracking_uri;
  double timeout = 60;
};

absl::Status MlflowRegisterCommand(run::JobContext& ctx) {
  using O = MlflowRegisterOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("run_dir", &O::run_dir, "the trained run (its mlflow/run.json names the run)")
          .Field("model_dir", &O::model_dir, "what kiln export wrote (its output folder)")
          .Field("name", &O::name, "the registered model's name")
          .Field("tracking_uri", &O::tracking_uri, "the server (null: the one the run logged to)")
          .Field("timeout", &O::timeout, "seconds for one request", GreaterThan(0.0)));
  KILN_ASSIGN_OR_RETURN(O o, CommandOptions(ctx.cfg, *binding, "mlflow-register"));
  if (!o.run_dir || !o.model_dir || !o.name || o.name->empty()) {
    return absl::InvalidArgumentError(
        "kiln mlflow-register needs run_dir=RUN model_dir=DIR name=NAME");
  }
  auto run = nlohmann::json::parse(
      ReadFileToString(*o.run_dir + "/mlflow/run.json").value_or(std::string()), nullptr,
      /*allow_exceptions=*/false);
  std::string run_id = run.is_object() ? run.value("run_id", "") : "";
  std::string root = run.is_object() ? run.value("artifact_root", "") : "";
  if (run_id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kiln mlflow-register: ", *o.run_dir,
        " has no MLflow run (no mlflow/run.json: train it with logger=mlflow, or send it with "
        "kiln mlflow-sync)"));
  }
  std::string artifact_root = mlflow::ProxiedArtifactRoot(root);
  if (artifact_root.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kiln mlflow-register: the run's artifacts are at ", root,
                     ", which kiln cannot write (start the server with --serve-artifacts)"));
  }
  std::string uri = o.tracking_uri.value_or(run.value("tracking_uri", ""));
  KILN_ASSIGN_OR_RETURN(mlflow::Client client, mlflow::Client::Create(uri, o.timeout));
  int sent = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(*o.model_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!it->is_regular_file() || absl::EndsWith(name, ".log") || name[0] == '.') continue;
    KILN_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(it->path().string()));
    KILN_RETURN_IF_ERROR(client.PutArtifact(artifact_root, "model/" + name, bytes));
    ++sent;
  }
  if (ec || sent == 0) {
    return absl::NotFoundError(absl::StrCat("kiln mlflow-register: ", *o.model_dir,
                                            " holds no files to register (kiln export's output "
                                            "folder: model.safetensors, model.pt, ...)"));
  }
  auto created = client.Post("registered-models/create", {{"name", *o.name}});
  if (!created.ok() && !absl::StrContains(created.status().message(), "already exists"))
    return created.status();
  KILN_ASSIGN_OR_RETURN(
      auto version,
      client.Post("model-versions/create",
                  {{"name", *o.name}, {"source", root + "/model"}, {"run_id", run_id}}));
  std::string number = version["model_version"].value("version", "");
  Logger::Instance().Info(absl::StrCat("registered ", sent, " files of ", *o.model_dir, " as ",
                                       *o.name, " version ", number, " (run ", run_id, ")"));
  std::printf("%s %s\n", o.name->c_str(), number.c_str());
  return absl::OkStatus();
}

const bool kMlflowRegisterRegistered = [] {
  run::RegisterCommand("mlflow-register", MlflowRegisterCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
