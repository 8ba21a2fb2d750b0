#include "lib/data/shards/shard_set.h"

#include <glob.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/status_macros.h"
#include "lib/data/shards/tar_shard.h"
#include "lib/logging/logger.h"

namespace kiln::data::shards {

int64_t ShardSet::samples() const {
  int64_t n = 0;
  for (const auto& shard : shards) n += shard.samples;
  return n;
}

absl::StatusOr<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  size_t open = pattern.find('{');
  if (open == std::string::npos) return std::vector<std::string>{pattern};
  size_t close = pattern.find('}', open);
  if (close == std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat("'", pattern, "': unclosed {"));
  std::string body = pattern.substr(open + 1, close - open - 1);
  std::string head = pattern.substr(0, open);
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> tails, ExpandBraces(pattern.substr(close + 1)));
  std::vector<std::string> items;
  size_t dots = body.find("..");
  if (dots != std::string::npos && body.find(',') == std::string::npos) {
    std::string low_text = body.substr(0, dots), high_text = body.substr(dots + 2);
    int64_t low = 0, high = 0;
    if (!absl::SimpleAtoi(low_text, &low) || !absl::SimpleAtoi(high_text, &high) || low < 0 ||
        high < low) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", pattern, "': {", body, "} is not a range LOW..HIGH of numbers"));
    }
    if (high - low >= 10'000'000)
      return absl::InvalidArgumentError(
          absl::StrCat("'", pattern, "': {", body, "} is too long a range"));
    size_t width = low_text.size() > 1 && low_text[0] == '0' ? low_text.size() : 0;
    for (int64_t i = low; i <= high; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < width) number.insert(0, width - number.size(), '0');
      items.push_back(std::move(number));
    }
  } else {
    items = absl::StrSplit(body, ',');
  }
  std::vector<std::string> out;
  for (const auto& item : items) {
    for (const auto& tail : tails) out.push_back(absl::StrCat(head, item, tail));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> MatchFiles(const std::string& spec,
                                                    const std::string& option) {
  auto expanded = ExpandBraces(spec);
  if (!expanded.ok())
    return absl::InvalidArgumentError(absl::StrCat(option, ": ", expanded.status().message()));
  std::vector<std::string> files;
  for (const auto& url : *expanded) {
    if (absl::StartsWith(url, "pipe:") || url.find_first_of("*?[") == std::string::npos) {
      files.push_back(url);
      continue;
    }
    glob_t found{};
    int rc = ::glob(url.c_str(), 0, nullptr, &found);
    if (rc == 0) {
      for (size_t i = 0; i < found.gl_pathc; ++i) files.push_back(found.gl_pathv[i]);
    }
    globfree(&found);
    if (rc != 0) return absl::NotFoundError(absl::StrCat(option, ": '", url, "' matches no file"));
  }
  return files;
}

namespace {

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

absl::StatusOr<ShardSet> ReadIndex(const std::string& path, const std::string& option) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(option, ": ", path, ": no such index file"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": ", path, ": not a shard index (", why, ")"));
  };
  if (json.is_discarded() || !json.is_object()) return bad("not a JSON object");
  if (!json.contains("shards") || !json["shards"].is_array()) return bad("no 'shards' list");
  ShardSet set;
  std::string dir = Dirname(path);
  for (const auto& entry : json["shards"]) {
    if (!entry.is_object() || !entry.contains("url") || !entry["url"].is_string() ||
        !entry.contains("samples") || !entry["samples"].is_number_integer() ||
        entry["samples"].get<int64_t>() < 0) {
      return bad("each shard needs a url and a sample count");
    }
    ShardInfo info;
    info.url = entry["url"].get<std::string>();
    if (!absl::StartsWith(info.url, "pipe:") && !absl::StartsWith(info.url, "/"))
      info.url = absl::StrCat(dir, "/", info.url);
    info.samples = entry["samples"].get<int64_t>();
    if (entry.contains("bytes") && entry["bytes"].is_number_integer())
      info.bytes = entry["bytes"].get<int64_t>();
    if (entry.contains("sha256") && entry["sha256"].is_string())
      info.sha256 = entry["sha256"].get<std::string>();
    set.shards.push_back(std::move(info));
  }
  if (json.contains("classes") && json["classes"].is_array()) {
    for (const auto& name : json["classes"]) {
      if (!name.is_string()) return bad("'classes' must be a list of names");
      set.classes.push_back(name.get<std::string>());
    }
  }
  return set;
}

// The shards `spec` names; with `count`, each shard without an index is read once for its sample
// count (what exact epochs need; a reader of everything in order does not).
absl::StatusOr<ShardSet> ResolveShards(const std::string& spec, const std::string& option,
                                       bool count) {
  if (spec.empty()) return absl::InvalidArgumentError(absl::StrCat(option, ": empty"));
  ShardSet set;
  if (absl::EndsWith(spec, ".json") && !absl::StartsWith(spec, "pipe:")) {
    KILN_ASSIGN_OR_RETURN(set, ReadIndex(spec, option));
  } else {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> urls, MatchFiles(spec, option));
    for (auto& url : urls) set.shards.push_back({std::move(url)});
    // Counted once, reading headers only (pipes are read through).
    for (auto& shard : set.shards) {
      if (!absl::StartsWith(shard.url, "pipe:")) {
        struct stat st;
        if (::stat(shard.url.c_str(), &st) != 0)
          return absl::NotFoundError(absl::StrCat(option, ": shard ", shard.url, ": no such file"));
      }
      if (count) {
        KILN_ASSIGN_OR_RETURN(shard.samples, CountSamples(shard.url));
      }
    }
    if (count) {
      Logger::Instance().Info(absl::StrCat(option, ": counted ", set.samples(), " samples in ",
                                           set.shards.size(),
                                           " shards (no index given; `kiln shard` writes one)"));
    }
  }
  if (set.shards.empty())
    return absl::NotFoundError(absl::StrCat(option, ": '", spec, "' names no shards"));
  if (count && set.samples() == 0)
    return absl::InvalidArgumentError(absl::StrCat(option, ": '", spec, "' holds no samples"));
  return set;
}

}  // namespace

absl::StatusOr<ShardSet> OpenShardSet(const std::string& spec, const std::string& option) {
  return ResolveShards(spec, option, /*count=*/true);
}

absl::Status ForEachShardSample(
    const std::string& spec,
    const std::function<absl::Status(ShardSample& sample, const std::string& where)>& visit) {
  // Read once, in order: no count first (a pipe: shard would be fetched twice).
  KILN_ASSIGN_OR_RETURN(ShardSet set, ResolveShards(spec, spec, /*count=*/false));
  for (const auto& shard : set.shards) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> reader, ShardReader::Open(shard.url));
    while (true) {
      KILN_ASSIGN_OR_RETURN(std::optional<ShardSample> sample, reader->Next());
      if (!sample) break;
      KILN_RETURN_IF_ERROR(
          visit(*sample, absl::StrCat("shard ", shard.url, ": sample ", sample->key)));
    }
  }
  return absl::OkStatus();
}

bool LooksLikeShardSpec(const std::string& spec) {
  return absl::StartsWith(spec, "pipe:") || absl::EndsWith(spec, ".tar") ||
         absl::EndsWith(spec, ".index.json") || absl::StrContains(spec, "{");
}

std::string IndexJson(const ShardSet& set, const std::string& dir) {
  nlohmann::ordered_json json;
  json["format"] = "webdataset";
  json["writer"] = "kiln shard";
  json["samples"] = set.samples();
  json["classes"] = set.classes;
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  std::string prefix = dir.empty() ? "" : absl::StrCat(dir, "/");
  for (const auto& shard : set.shards) {
    nlohmann::ordered_json entry;
    entry["url"] = !prefix.empty() && absl::StartsWith(shard.url, prefix)
                       ? shard.url.substr(prefix.size())
                       : shard.url;
    entry["samples"] = shard.samples;
    entry["bytes"] = shard.bytes;
    entry["sha256"] = shard.sha256;
    shards.push_back(std::move(entry));
  }
  json["shards"] = std::move(shards);
  return json.dump(1) + "\n";
}

absl::Status VerifyShardSet(const ShardSet& set) {
  for (const auto& shard : set.shards) {
    if (absl::StartsWith(shard.url, "pipe:")) continue;
    struct stat st;
    if (::stat(shard.url.c_str(), &st) != 0)
      return absl::NotFoundError(absl::StrCat("shard ", shard.url, ": no such file"));
    if (shard.bytes >= 0 && st.st_size != shard.bytes) {
      return absl::DataLossError(absl::StrCat("shard ", shard.url, ": ", st.st_size,
                                              " bytes, the index says ", shard.bytes));
    }
    if (!shard.sha256.empty()) {
      KILN_ASSIGN_OR_RETURN(std::string sum, FileSha256(shard.url));
      if (sum != shard.sha256)
        return absl::DataLossError(
            absl::StrCat("shard ", shard.url, ": SHA-256 differs from the index"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::data::shards
