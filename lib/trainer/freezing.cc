#include "lib/trainer/freezing.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln {

bool GlobMatches(const std::string& glob, const std::string& name) {
  return ::fnmatch(glob.c_str(), name.c_str(), 0) == 0;
}

absl::StatusOr<std::vector<std::string>> ParametersMatching(torch::nn::Module& module,
                                                            const std::vector<std::string>& globs,
                                                            const std::string& option) {
  std::vector<std::string> all;
  for (const auto& p : module.named_parameters()) all.push_back(p.key());
  return NamesMatching(all, globs, option);
}

absl::StatusOr<std::vector<std::string>> NamesMatching(const std::vector<std::string>& all,
                                                       const std::vector<std::string>& globs,
                                                       const std::string& option) {
  for (const auto& glob : globs) {
    if (std::none_of(all.begin(), all.end(),
                     [&](const std::string& n) { return GlobMatches(glob, n); })) {
      size_t shown = std::min<size_t>(all.size(), 6);
      return absl::InvalidArgumentError(absl::StrCat(
          option, ": '", glob, "' matches no parameter of the model (",
          all.size() > shown ? "first of " : "", "its ", all.size(), ": ",
          absl::StrJoin(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(shown), ", "), ")"));
    }
  }
  std::vector<std::string> names;
  for (const auto& name : all) {
    if (std::any_of(globs.begin(), globs.end(),
                    [&](const std::string& g) { return GlobMatches(g, name); })) {
      names.push_back(name);
    }
  }
  return names;
}

void SetTrainable(torch::nn::Module& module, const std::vector<std::string>& names,
                  bool trainable) {
  std::set<std::string> wanted(names.begin(), names.end());
  for (auto& p : module.named_parameters()) {
    if (wanted.count(p.key()) > 0) p.value().set_requires_grad(trainable);
  }
}

bool AnyTrainable(torch::nn::Module& module) {
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) return true;
  }
  return false;
}

std::vector<std::shared_ptr<torch::nn::Module>> BatchNormsWithin(
    torch::nn::Module& module, const std::vector<std::string>& names) {
  std::set<std::string> frozen(names.begin(), names.end());
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (item.value()->name().find("BatchNorm") == std::string::npos) continue;
    auto params = item.value()->named_parameters(/*recurse=*/false);
    bool all = params.size() > 0;
    for (const auto& p : params) {
      std::string full = item.key().empty() ? p.key() : item.key() + "." + p.key();
      all = all && frozen.count(full) > 0;
    }
    if (all) out.push_back(item.value());
  }
  return out;
}

absl::Status FrozenBatchNormsInEval::OnTrainBatchStart(Trainer&, const data::Batch&) {
  for (auto& norm : norms_) norm->eval();
  return absl::OkStatus();
}

}  // namespace kiln
