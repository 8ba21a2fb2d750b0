#include "lib/trainer/pretrained_weights.h"

#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/safetensors.h"

namespace kiln {
namespace {

std::string Shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

// The module's parameters and buffers by name, in the module's order.
std::vector<std::pair<std::string, torch::Tensor>> Entries(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : module.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

bool MatchesAny(const std::vector<std::string>& globs, const std::string& name) {
  for (const auto& g : globs) {
    if (GlobMatches(g, name)) return true;
  }
  return false;
}

// "fc2.weight" -> "fc2.*": the glob to suggest for ignoring a layer.
std::string LayerGlob(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot) + ".*";
}

}  // namespace

int64_t WeightLoadReport::Count(const std::string& status) const {
  int64_t n = 0;
  for (const auto& row : rows) n += row.status == status ? 1 : 0;
  return n;
}

std::string WeightLoadReport::Table() const {
  size_t width = 4;
  for (const auto& row : rows) width = std::max(width, row.name.size());
  std::string out;
  for (const auto& row : rows) {
    std::string shapes = row.status == "mismatched"
                             ? absl::StrCat(row.file_shape, " -> ", row.model_shape)
                         : row.model_shape.empty() ? absl::StrCat(row.file_shape, " (file)")
                                                   : row.model_shape;
    absl::StrAppend(&out, absl::StrFormat("  %-10s %-*s %s\n", row.status, static_cast<int>(width),
                                          row.name, shapes));
  }
  return out;
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadPretrainedWeights(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("model.init_from: no such file: ", path));
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  // kiln checkpoints are LibTorch archives, which are zip files; safetensors starts with its
  // header's length.
  if (in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4) {
    torch::serialize::InputArchive archive;
    KILN_RETURN_IF_ERROR(ReadCheckpoint(path, &archive));
    return ReadModelState(archive, path);
  }
  return ReadSafetensors(path);
}

absl::StatusOr<WeightLoadReport> LoadPretrainedWeights(
    const std::map<std::string, torch::Tensor>& state, torch::nn::Module& module,
    const WeightLoadSpec& spec) {
  const std::string where = absl::StrCat(spec.option, " ", spec.path);
  // The file's names as the model calls them: the longest matching prefix of init_map renamed.
  std::map<std::string, std::string> to_file;  // model name -> file name
  std::set<std::string> used_prefixes;
  WeightLoadReport report;
  std::vector<std::pair<std::string, torch::Tensor>> entries = Entries(module);
  std::set<std::string> model_names;
  for (const auto& e : entries) model_names.insert(e.first);
  std::vector<std::pair<std::string, std::string>> unknown;  // mapped name, file name
  for (const auto& [file_name, tensor] : state) {
    std::string mapped = file_name;
    size_t best = 0;
    const std::pair<std::string, std::string>* rule = nullptr;
    for (const auto& r : spec.rename) {
      if (file_name.rfind(r.first, 0) == 0 && (rule == nullptr || r.first.size() > best)) {
        rule = &r;
        best = r.first.size();
      }
    }
    if (rule != nullptr) {
      mapped = rule->second + file_name.substr(rule->first.size());
      used_prefixes.insert(rule->first);
    }
    if (to_file.count(mapped) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": '", to_file[mapped], "' and '",
                                                     file_name, "' both become '", mapped,
                                                     "' under model.init_map"));
    }
    to_file[mapped] = file_name;
    if (model_names.count(mapped) == 0) unknown.emplace_back(mapped, file_name);
  }
  for (const auto& r : spec.rename) {
    if (used_prefixes.count(r.first) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.init_map: prefix '", r.first,
                                                     "' matches no name in ", spec.path,
                                                     " (a typo would silently load nothing)"));
    }
  }
  for (const auto& glob : spec.ignore) {
    bool used = false;
    for (const auto& [mapped, file_name] : to_file) used = used || GlobMatches(glob, mapped);
    for (const auto& name : model_names) used = used || GlobMatches(glob, name);
    if (!used) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.init_ignore: '", glob, "' matches no name in the model or in ",
                       spec.path, " (a typo would silently load what it meant to skip)"));
    }
  }
  std::vector<std::string> missing;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // target, source
  for (const auto& [name, target] : entries) {
    auto it = to_file.find(name);
    const torch::Tensor* source = it == to_file.end() ? nullptr : &state.at(it->second);
    std::string file_shape = source != nullptr ? Shape(*source) : "";
    if (MatchesAny(spec.ignore, name)) {
      report.rows.push_back({"ignored", name, Shape(target), file_shape});
    } else if (source == nullptr) {
      report.rows.push_back({"missing", name, Shape(target), ""});
      missing.push_back(name);
    } else if (source->sizes() != target.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": '", name, "' is ", file_shape, " there and ", Shape(target),
                       " in the model; to keep the model's, list it in model.init_ignore (e.g. "
                       "model.init_ignore=[",
                       LayerGlob(name), "])"));
    } else {
      report.rows.push_back({"loaded", name, Shape(target), file_shape});
      copies.emplace_back(target, *source);
    }
  }
  for (const auto& [mapped, file_name] : unknown) {
    report.rows.push_back({MatchesAny(spec.ignore, mapped) ? "ignored" : "unused", mapped, "",
                           Shape(state.at(file_name))});
  }
  if (copies.empty() && !entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": checkpoint of another model: none of the model's names is in it (the file's first: '",
        state.empty() ? "" : state.begin()->first, "', the model's: '", entries.front().first,
        "'); rename prefixes with model.init_map"));
  }
  if (spec.strict && !missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the model's '", missing.front(), "'",
        missing.size() > 1 ? absl::StrCat(" and ", missing.size() - 1, " more are") : " is",
        " not in the file; list them in model.init_ignore (e.g. [", LayerGlob(missing.front()),
        "]) or set model.init_strict=false"));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, source] : copies) target.copy_(source);
  return report;
}

}  // namespace kiln
