#include "lib/weights/checkpoint_average.h"

#include <dirent.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/weights/checkpoint.h"

namespace kiln {
namespace {

std::string MetaString(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  return archive.try_read(key, value) && value.isString() ? value.toStringRef() : "";
}

}  // namespace

absl::StatusOr<AveragedWeights> AverageCheckpoints(const std::vector<std::string>& paths) {
  if (paths.size() < 2)
    return absl::InvalidArgumentError("kiln average needs at least two checkpoints");
  AveragedWeights out;
  std::map<std::string, torch::Tensor> sums;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    torch::serialize::InputArchive archive;
    KILN_RETURN_IF_ERROR(ReadCheckpoint(path, &archive));
    KILN_ASSIGN_OR_RETURN(auto state, ReadModelState(archive, path));
    std::string model = MetaString(archive, "meta/model");
    out.config = MetaString(archive, "meta/config");
    const std::string digest = StoredFrozenDigest(archive);
    if (i == 0) {
      out.model_name = model;
      out.frozen_digest = digest;
      for (const auto& [name, t] : state)
        sums[name] = t.is_floating_point() ? t.to(torch::kFloat64) : t.clone();
      out.state = state;
      continue;
    }
    auto refuse = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("kiln average: ", paths[0], " and ", path, " hold different models: ", why));
    };
    if (model != out.model_name)
      return refuse(absl::StrCat("'", out.model_name, "' and '", model, "'"));
    if (digest != out.frozen_digest)
      return refuse("LoRA adapters of different frozen weights, or adapters and a whole model");
    for (const auto& [name, t] : state) {
      auto it = sums.find(name);
      if (it == sums.end()) return refuse(absl::StrCat("'", name, "' is only in the second"));
      if (it->second.sizes() != t.sizes()) {
        return refuse(absl::StrCat("'", name, "' is ", c10::str(it->second.sizes()), " and ",
                                   c10::str(t.sizes())));
      }
      if (t.is_floating_point()) {
        it->second.add_(t.to(torch::kFloat64));
      } else {
        it->second = t.clone();  // counters: the last checkpoint's
      }
    }
    if (state.size() != sums.size()) {
      for (const auto& [name, t] : sums) {
        if (state.count(name) == 0)
          return refuse(absl::StrCat("'", name, "' is only in the first"));
      }
    }
  }
  const double n = static_cast<double>(paths.size());
  for (auto& [name, t] : out.state) {
    const torch::Tensor& sum = sums.at(name);
    t = t.is_floating_point() ? (sum / n).to(t.scalar_type()) : sum;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> NewestCheckpoints(const std::string& run_dir, int64_t n) {
  std::string dir = IsDirectory(run_dir + "/checkpoints") ? run_dir + "/checkpoints" : run_dir;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return absl::NotFoundError(absl::StrCat("kiln average: run_dir ", run_dir, " is not a folder"));
  std::vector<std::pair<int64_t, std::string>> found;  // (optimizer steps, path)
  std::vector<std::string> files;
  while (dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (absl::EndsWith(name, ".ckpt") && name != "last.ckpt") files.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const auto& path : files) {
    torch::serialize::InputArchive archive;
    KILN_RETURN_IF_ERROR(ReadCheckpoint(path, &archive));
    c10::IValue step;
    if (!archive.try_read("loop/global_step", step) || !step.isInt())
      continue;  // an average, not a training one
    found.emplace_back(step.toInt(), path);
  }
  if (static_cast<int64_t>(found.size()) < n) {
    return absl::NotFoundError(
        absl::StrCat("kiln average: last_n=", n, " but ", dir, " holds ", found.size(),
                     " training checkpoints besides last.ckpt (keep more with "
                     "callbacks.model_checkpoint.save_top_k=-1)"));
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> newest;
  for (size_t i = found.size() - static_cast<size_t>(n); i < found.size(); ++i)
    newest.push_back(found[i].second);
  return newest;
}

absl::Status WriteAveragedCheckpoint(const std::string& path, const AveragedWeights& averaged,
                                     const std::vector<std::string>& sources) {
  return WriteCheckpoint(path, [&](torch::serialize::OutputArchive& archive) {
    WriteCheckpointMeta(archive, averaged.model_name, averaged.config);
    archive.write("meta/averaged_from", c10::IValue(absl::StrJoin(sources, "\n")));
    WriteModelState(averaged.state, archive);
    if (!averaged.frozen_digest.empty())
      archive.write("meta/frozen_digest", c10::IValue(averaged.frozen_digest));
  });
}

}  // namespace kiln
