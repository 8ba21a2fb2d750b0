#include "lib/weights/sharded_checkpoint.h"

#include <sys/stat.h>

#include <fstream>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/weights/checkpoint.h"
#include "nlohmann/json.hpp"

namespace kiln {
namespace {

constexpr char kFormat[] = "kiln-sharded-checkpoint";

std::vector<std::string> Lines(const c10::IValue& v) {
  std::vector<std::string> out;
  if (!v.isString()) return out;
  for (absl::string_view s : absl::StrSplit(v.toStringRef(), '\n', absl::SkipEmpty()))
    out.emplace_back(s);
  return out;
}

// The whole tensor from the ranks' pieces of a parameter of `shape` (or of its optimizer state):
// the pieces, concatenated along dimension 0 in rank order, cut to the parameter's rows. fsdp's
// pieces are equal zero-padded parts; a sharded table's are row blocks (row-wise) or the whole
// table on one rank and empty pieces on the others (table-wise). Pieces that do not make the
// rows (state that is not per row) are rank 0's as they are.
torch::Tensor Join(const std::vector<torch::Tensor>& pieces, const std::vector<int64_t>* shape) {
  const torch::Tensor& first = pieces[0];
  if (shape == nullptr || first.dim() == 0) return first;
  const int64_t rows = shape->empty() ? 1 : (*shape)[0];
  int64_t total = 0;
  for (const auto& p : pieces) {
    if (p.dim() != first.dim() || p.sizes().slice(1) != first.sizes().slice(1)) return first;
    total += p.size(0);
  }
  if (total < rows || first.size(0) == total) return first;
  torch::Tensor whole = torch::cat(pieces, 0).narrow(0, 0, rows);
  // A scalar parameter travels as one row.
  if (shape->empty() && whole.numel() == 1) return whole.reshape({}).contiguous();
  return whole.contiguous();
}

struct Sources {
  std::vector<torch::serialize::InputArchive>* ranks;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> model_names;  // model/i -> name
  // rank 0's optimizer-state key -> each rank's key for the same parameter, and its name
  std::map<std::string, std::vector<std::string>> state_keys;
  std::map<std::string, std::string> state_param;
};

// Copies `in` (rank 0's archive at `path`) into `out`, joining the pieces of sharded tensors.
void Copy(torch::serialize::InputArchive& in, torch::serialize::OutputArchive& out,
          const std::vector<std::string>& path, const Sources& sources) {
  for (const std::string& key : in.keys()) {
    torch::Tensor t;
    torch::serialize::InputArchive sub;
    c10::IValue value;
    std::vector<std::string> here = path;
    here.push_back(key);
    if (in.try_read(key, t)) {
      const std::vector<int64_t>* shape = nullptr;
      std::vector<torch::Tensor> pieces;
      auto each_rank =
          [&](const std::function<torch::Tensor(torch::serialize::InputArchive&, size_t)>& read) {
            for (size_t r = 0; r < sources.ranks->size(); ++r)
              pieces.push_back(read((*sources.ranks)[r], r));
          };
      if (here.size() == 1 && absl::StartsWith(key, "model/") && key != "model/names") {
        size_t i = std::stoul(key.substr(6));
        auto it = i < sources.model_names.size() ? sources.shapes.find(sources.model_names[i])
                                                 : sources.shapes.end();
        if (it != sources.shapes.end()) {
          shape = &it->second;
          each_rank([&](torch::serialize::InputArchive& a, size_t) {
            torch::Tensor piece;
            a.read(key, piece);
            return piece;
          });
        }
      } else if (here.size() == 4 && here[0] == "optimizer" && here[1] == "state") {
        auto keys = sources.state_keys.find(here[2]);
        auto name = sources.state_param.find(here[2]);
        auto it = name == sources.state_param.end() ? sources.shapes.end()
                                                    : sources.shapes.find(name->second);
        if (keys != sources.state_keys.end() && it != sources.shapes.end()) {
          shape = &it->second;
          each_rank([&](torch::serialize::InputArchive& a, size_t r) {
            torch::serialize::InputArchive opt, state, param;
            a.read("optimizer", opt);
            opt.read("state", state);
            state.read(keys->second[r], param);
            torch::Tensor piece;
            param.read(key, piece);
            return piece;
          });
        }
      }
      out.write(key, shape != nullptr ? Join(pieces, shape) : t);
    } else if (in.try_read(key, sub)) {
      torch::serialize::OutputArchive nested(out.compilation_unit());
      Copy(sub, nested, here, sources);
      out.write(key, nested);
    } else if (in.try_read(key, value)) {
      out.write(key, value);
    }
  }
}

// position in the optimizer's groups -> its state key, in one rank's archive.
std::vector<std::string> OptimizerKeys(torch::serialize::InputArchive& archive) {
  std::vector<std::string> keys;
  torch::serialize::InputArchive opt, groups;
  if (!archive.try_read("optimizer", opt) || !opt.try_read("param_groups", groups)) return keys;
  c10::IValue size_value;
  torch::Tensor size;
  if (!groups.try_read("param_groups/size", size)) return keys;
  for (int64_t g = 0; g < size.item<int64_t>(); ++g) {
    torch::serialize::InputArchive group;
    groups.read(absl::StrCat("param_groups/", g), group);
    torch::Tensor count;
    group.read("params/size", count);
    for (int64_t i = 0; i < count.item<int64_t>(); ++i) {
      c10::IValue key;
      group.read(absl::StrCat("params/", i), key);
      keys.push_back(key.toStringRef());
    }
  }
  return keys;
}

}  // namespace

std::string ShardFileName(int64_t rank, int64_t world_size) {
  return absl::StrCat("rank-", rank, "-of-", world_size, ".ckpt");
}

bool IsShardedCheckpoint(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         IsRegularFile(path + "/meta.json");
}

absl::Status WriteShardedCheckpointMeta(const std::string& dir, const ShardedCheckpointMeta& meta) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = 1;
  j["world_size"] = meta.world_size;
  j["run"] = meta.run;
  j["step"] = meta.step;
  nlohmann::ordered_json shapes = nlohmann::ordered_json::object();
  for (const auto& [name, shape] : meta.shapes) shapes[name] = shape;
  j["parameters"] = shapes;
  return WriteFileAtomically(dir + "/meta.json", j.dump(1) + "\n");
}

void WriteShardKeys(torch::serialize::OutputArchive& archive, const ShardedCheckpointMeta& meta,
                    int64_t rank, const std::vector<std::string>& optimizer_params) {
  archive.write("fsdp/run", c10::IValue(meta.run));
  archive.write("fsdp/rank", c10::IValue(rank));
  archive.write("fsdp/world_size", c10::IValue(meta.world_size));
  archive.write("fsdp/optimizer_params", c10::IValue(absl::StrJoin(optimizer_params, "\n")));
}

absl::Status ReadShardedCheckpoint(const std::string& dir, torch::serialize::InputArchive* archive,
                                   torch::Device device) {
  const std::string meta_path = dir + "/meta.json";
  ShardedCheckpointMeta meta;
  try {
    std::ifstream in(meta_path);
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("format", "") != kFormat) {
      return absl::InvalidArgumentError(
          absl::StrCat(meta_path, ": not a kiln sharded checkpoint (format is not ", kFormat, ")"));
    }
    meta.world_size = j.at("world_size").get<int64_t>();
    meta.run = j.at("run").get<std::string>();
    meta.step = j.at("step").get<int64_t>();
    for (const auto& [name, shape] : j.at("parameters").items())
      meta.shapes[name] = shape.get<std::vector<int64_t>>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": unreadable sharded-checkpoint description (", e.what(), ")"));
  }
  if (meta.world_size < 1 || meta.world_size > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": world_size ", meta.world_size, " is out of range"));
  }
  std::vector<torch::serialize::InputArchive> ranks(static_cast<size_t>(meta.world_size));
  for (int64_t r = 0; r < meta.world_size; ++r) {
    const std::string file = absl::StrCat(dir, "/", ShardFileName(r, meta.world_size));
    if (!IsRegularFile(file)) {
      return absl::NotFoundError(absl::StrCat(file, ": missing; this sharded checkpoint has ",
                                              meta.world_size, " pieces, one per rank"));
    }
    KILN_RETURN_IF_ERROR(ReadCheckpoint(file, &ranks[r], device));
    c10::IValue run, rank, step;
    if (!ranks[r].try_read("fsdp/run", run) || !run.isString() || run.toStringRef() != meta.run ||
        !ranks[r].try_read("fsdp/rank", rank) || !rank.isInt() || rank.toInt() != r) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": a piece of another checkpoint (not run ", meta.run, "'s rank ", r,
                       "); every piece must come from the same save"));
    }
    if (!ranks[r].try_read("loop/global_step", step) || !step.isInt() ||
        step.toInt() != meta.step) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": written at step ", step.isInt() ? step.toInt() : -1, ", but ", meta_path,
          " is step ", meta.step, "'s; every piece must come from the same save"));
    }
  }
  try {
    Sources sources;
    sources.ranks = &ranks;
    sources.shapes = meta.shapes;
    c10::IValue names;
    if (ranks[0].try_read("model/names", names)) sources.model_names = Lines(names);
    c10::IValue opt_names;
    if (ranks[0].try_read("fsdp/optimizer_params", opt_names)) {
      std::vector<std::string> params = Lines(opt_names);
      std::vector<std::vector<std::string>> keys;
      for (auto& a : ranks) keys.push_back(OptimizerKeys(a));
      for (size_t i = 0; i < params.size() && i < keys[0].size(); ++i) {
        std::vector<std::string> per_rank;
        for (const auto& k : keys) per_rank.push_back(i < k.size() ? k[i] : "");
        sources.state_keys[keys[0][i]] = per_rank;
        sources.state_param[keys[0][i]] = params[i];
      }
    }
    // At most two copies of the whole model at a time: the pieces and the joined archive, then
    // the joined archive and its bytes, then the bytes and the archive read back from them.
    std::string bytes;
    {
      torch::serialize::OutputArchive whole;
      Copy(ranks[0], whole, {}, sources);
      ranks.clear();  // the joined tensors are copies; rank 0's others stay referenced by `whole`
      whole.save_to([&bytes](const void* data, size_t size) {
        bytes.append(static_cast<const char*>(data), size);
        return size;
      });
    }
    archive->load_from(bytes.data(), bytes.size(), device);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": cannot join the pieces of this sharded checkpoint: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace kiln
