#include "lib/weights/hf_export.h"

#include <map>

#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/weights/safetensors.h"

namespace kiln {
namespace {

std::map<std::string, HfExporter>& Exporters() {
  static auto* exporters = new std::map<std::string, HfExporter>();
  return *exporters;
}

}  // namespace

void RegisterHfExporter(const std::string& model_target, HfExporter exporter) {
  Exporters()[model_target] = std::move(exporter);
}

const HfExporter* FindHfExporter(const std::string& model_target) {
  auto it = Exporters().find(model_target);
  return it == Exporters().end() ? nullptr : &it->second;
}

std::vector<std::string> HfExportableModels() {
  std::vector<std::string> names;
  for (const auto& [name, exporter] : Exporters()) names.push_back(name);
  return names;
}

absl::Status WriteHfFolder(const HfFolder& folder, const std::string& dir) {
  KILN_RETURN_IF_ERROR(MakeDirs(dir));
  KILN_RETURN_IF_ERROR(
      WriteSafetensors(dir + "/model.safetensors", folder.tensors, {{"format", "pt"}}));
  if (!folder.generation_config_json.empty()) {
    KILN_RETURN_IF_ERROR(
        WriteFileAtomically(dir + "/generation_config.json", folder.generation_config_json));
  }
  // config.json last: a folder with it is a whole one.
  return WriteFileAtomically(dir + "/config.json", folder.config_json);
}

}  // namespace kiln
