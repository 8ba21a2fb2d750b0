// A set of shards (one split of a data set) and its index: what `data.train_shards` names.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::data::shards {

struct ShardSample;

struct ShardInfo {
  std::string url;  // a local path or pipe:CMD
  int64_t samples = 0;
  int64_t bytes = -1;  // -1: unknown
  std::string sha256;  // "": unknown
};

// The index `kiln shard` writes beside a split's shards (SPLIT.index.json): the shards in order
// with their sample counts (exact epochs and resume without reading them first), sizes and
// SHA-256 checksums, and the class names.
struct ShardSet {
  std::vector<ShardInfo> shards;
  std::vector<std::string> classes;
  int64_t samples() const;
};

// Bash's brace expansion as WebDataset uses it: "train-{000000..000099}.tar" (numeric ranges,
// zero-padded to the width of their bounds) and "{a,b}" lists; several groups multiply out.
absl::StatusOr<std::vector<std::string>> ExpandBraces(const std::string& pattern);

// The files `spec` names, in order: its {..} ranges and lists expanded, each local glob (*, ?,
// [..]) replaced by its matches in sorted order; a pipe:CMD or a path without wildcards as it is
// (not checked). `option` names the setting in errors (a glob matching nothing is one).
absl::StatusOr<std::vector<std::string>> MatchFiles(const std::string& spec,
                                                    const std::string& option);

// The shards `spec` names: an index file (*.json, its shard URLs relative to its folder), or URLs
// with braces: local paths (globs allowed) or pipe:CMD. Without an index every shard is read once
// to count its samples. `option` names the setting in errors (data.train_shards).
absl::StatusOr<ShardSet> OpenShardSet(const std::string& spec, const std::string& option);

// Reads every sample of `spec`'s shards (OpenShardSet's spec) in storage order, handing each to
// `visit` with the place that names it in messages ("shard URL: sample KEY"); stops at the first
// error. For the modules that read a split whole into memory (labelled_text, audio_manifest).
absl::Status ForEachShardSample(
    const std::string& spec,
    const std::function<absl::Status(ShardSample& sample, const std::string& where)>& visit);

// True when a data file setting names shards rather than a file: pipe:CMD, *.tar, *.index.json, or
// a {..} range (what labelled_text and audio_manifest take as shards).
bool LooksLikeShardSpec(const std::string& spec);

// The index as JSON, shard URLs relative to `dir` when they are inside it.
std::string IndexJson(const ShardSet& set, const std::string& dir);

// Checks every shard of an index against its recorded size and SHA-256 (local shards only).
absl::Status VerifyShardSet(const ShardSet& set);

}  // namespace kiln::data::shards
