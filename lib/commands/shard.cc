// `kiln shard`: the data module's splits as WebDataset-layout tar shards, for data=shards
// (docs/data.md): OUT/SPLIT-000000.tar ... of at most shard.max_size bytes or shard.max_count
// samples, and OUT/SPLIT.index.json with each shard's sample count, size and SHA-256.
#include <glob.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "lib/base/exit_code.h"
#include "lib/base/files.h"
#include "lib/commands/job.h"
#include "lib/data/shards/shard_set.h"
#include "lib/data/shards/tar_shard.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/trainer/process_settings.h"

namespace kiln {
namespace {

struct ShardOptions {
  std::string out = "shards";
  std::vector<std::string> splits = {"train", "val", "test"};
  std::string max_size = "256MB";
  std::optional<int64_t> max_count;
};

// "256MB" (powers of 1000), "1GiB" (powers of 1024) or a byte count.
absl::StatusOr<int64_t> ParseSize(const std::string& text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < rest.size() && (absl::ascii_isdigit(rest[digits]) || rest[digits] == '.'))
    ++digits;
  double number = 0;
  if (digits == 0 || !absl::SimpleAtod(rest.substr(0, digits), &number)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard.max_size: '", text, "' is not a size like 256MB"));
  }
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(rest.substr(digits)));
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},     {"b", 1},        {"kb", 1e3},        {"mb", 1e6},
      {"gb", 1e9}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      if (number * scale < 1024)
        return absl::InvalidArgumentError(
            absl::StrCat("shard.max_size: '", text, "' is under 1 KiB"));
      if (number * scale > 1e18)
        return absl::InvalidArgumentError(
            absl::StrCat("shard.max_size: '", text, "' is too large"));
      return static_cast<int64_t>(number * scale);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("shard.max_size: '", text, "': unknown unit (B, KB, MB, GB, KiB, MiB, GiB)"));
}

absl::StatusOr<ShardOptions> ReadOptions(const config::Config& cfg) {
  using O = ShardOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("out", &O::out, "folder the shards and their indexes go to")
          .Field("splits", &O::splits,
                 "which of the data module's splits to write (train, val, test, predict)",
                 Each(OneOf({"train", "val", "test", "predict"})))
          .Field("max_size", &O::max_size, "bytes per shard at most: 256MB, 1GiB, ...")
          .Field("max_count", &O::max_count, "samples per shard at most (null: no limit)",
                 AtLeast(1)));
  config::NodePtr mine =
      IsNull(cfg, "shard") ? config::Node::Map() : cfg.Get<config::NodePtr>("shard").value();
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled,
                        binding->schema().Apply(*mine, "shard", "command 'shard'"));
  return binding->Fill(config::Config(filled));
}

// Writes `dataset` as OUT/SPLIT-NNNNNN.tar and OUT/SPLIT.index.json.
absl::Status WriteSplit(const data::Dataset& dataset, const std::string& split,
                        const std::vector<std::string>& classes, const std::string& out,
                        int64_t max_bytes, int64_t max_count) {
  data::shards::ShardSet set;
  set.classes = classes;
  // An index of an earlier write describes shards about to be replaced: it goes first.
  std::string index = absl::StrCat(out, "/", split, ".index.json");
  ::unlink(index.c_str());
  std::unique_ptr<data::shards::ShardWriter> writer;
  auto finish = [&]() -> absl::Status {
    if (writer == nullptr) return absl::OkStatus();
    int64_t samples = writer->samples();
    KILN_ASSIGN_OR_RETURN(std::string sha, writer->Close());
    data::shards::ShardInfo& info = set.shards.back();
    info.samples = samples;
    info.sha256 = sha;
    std::error_code error;
    info.bytes = static_cast<int64_t>(std::filesystem::file_size(info.url, error));
    if (error)
      return absl::NotFoundError(
          absl::StrCat(info.url, ": cannot read its size: ", error.message()));
    writer.reset();
    return absl::OkStatus();
  };
  const int64_t count = dataset.encoded_size();
  for (int64_t i = 0; i < count; ++i) {
    // SIGINT/SIGTERM: the shard being written is removed (never left under its name), the split's
    // index is not written; shards already finished stay, as does every earlier split.
    KILN_RETURN_IF_ERROR(CheckStopSignal(absl::StrCat(
        "while writing ", split, " (sample ", i, " of ", count, "); its index was not written")));
    auto files = dataset.Encoded(i);
    if (!files.ok())
      return absl::Status(files.status().code(), absl::StrCat("kiln shard: ", split, " sample ", i,
                                                              ": ", files.status().message()));
    int64_t bytes = 0;
    for (const auto& [ext, content] : *files)
      bytes += 512 + ((static_cast<int64_t>(content.size()) + 511) / 512) * 512;
    if (writer != nullptr && writer->samples() > 0 &&
        (writer->bytes() + bytes > max_bytes || writer->samples() >= max_count)) {
      KILN_RETURN_IF_ERROR(finish());
    }
    if (writer == nullptr) {
      std::string path = absl::StrFormat("%s/%s-%06d.tar", out, split, set.shards.size());
      KILN_ASSIGN_OR_RETURN(writer, data::shards::ShardWriter::Create(path));
      set.shards.push_back({path});
    }
    KILN_RETURN_IF_ERROR(writer->Add(absl::StrFormat("%09d", i), *files));
  }
  KILN_RETURN_IF_ERROR(finish());
  // Shards of an earlier, larger write of this split would be read by a glob: remove them.
  glob_t found{};
  if (::glob(absl::StrCat(out, "/", split, "-[0-9][0-9][0-9][0-9][0-9][0-9].tar").c_str(), 0,
             nullptr, &found) == 0) {
    for (size_t i = set.shards.size(); i < found.gl_pathc; ++i) ::unlink(found.gl_pathv[i]);
  }
  globfree(&found);
  KILN_RETURN_IF_ERROR(WriteFileAtomically(index, data::shards::IndexJson(set, out)));
  int64_t total_bytes = 0;
  for (const auto& shard : set.shards) total_bytes += shard.bytes;
  Logger::Instance().Info(absl::StrFormat(
      "%s: %d samples in %d shards (%.1f MB) in %s/%s-*.tar, index %s", split, set.samples(),
      set.shards.size(), static_cast<double>(total_bytes) / 1e6, out, split, index));
  std::printf("%s\n", index.c_str());
  return absl::OkStatus();
}

absl::Status ShardCommand(run::JobContext& ctx) {
  StopSignals stop_signals;
  KILN_ASSIGN_OR_RETURN(ShardOptions o, ReadOptions(ctx.cfg));
  KILN_ASSIGN_OR_RETURN(int64_t max_bytes, ParseSize(o.max_size));
  int64_t max_count = o.max_count.value_or(std::numeric_limits<int64_t>::max());
  KILN_ASSIGN_OR_RETURN(config::Config data_cfg, ctx.cfg.Sub("data"));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<data::DataModule> dm,
                        Registry<data::DataModule>::Get().Instantiate(data_cfg));
  KILN_RETURN_IF_ERROR(dm->PrepareData());
  KILN_RETURN_IF_ERROR(MakeDirs(o.out));
  bool fit_ready = false, test_ready = false, predict_ready = false;
  for (const auto& split : o.splits) {
    std::shared_ptr<const data::Dataset> dataset;
    if (split == "train" || split == "val") {
      if (!fit_ready) KILN_RETURN_IF_ERROR(dm->Setup(data::Stage::kFit));
      fit_ready = true;
      dataset = split == "train" ? dm->train_dataset() : dm->val_dataset();
    } else if (split == "test") {
      if (!test_ready) KILN_RETURN_IF_ERROR(dm->Setup(data::Stage::kTest));
      test_ready = true;
      dataset = dm->test_dataset();
    } else {
      if (!predict_ready) KILN_RETURN_IF_ERROR(dm->Setup(data::Stage::kPredict));
      predict_ready = true;
      dataset = dm->predict_dataset();
    }
    if (dataset == nullptr) {
      Logger::Instance().Info(
          absl::StrCat("kiln shard: the data module has no ", split, " split; none written"));
      continue;
    }
    KILN_RETURN_IF_ERROR(
        WriteSplit(*dataset, split, dm->class_names(), o.out, max_bytes, max_count));
  }
  return absl::OkStatus();
}

const bool kShardRegistered = [] {
  run::RegisterCommand("shard", ShardCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
