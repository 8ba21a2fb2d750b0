#include "lib/weights/sharded_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/error_text.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/lazy_archive.h"
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

// A tensor each rank holds a piece of: a parameter, or a tensor of its optimizer state.
struct ShardedEntry {
  std::string id;  // "model/I", or "optimizer/state/KEY/NAME" with rank 0's KEY (PathId's form)
  const std::vector<int64_t>* shape = nullptr;  // the parameter's whole shape
  const PieceRows* wanted = nullptr;            // the rows the reader keeps; null: the whole
  bool model = true;
  size_t position = 0;  // optimizer state: the parameter's position in the optimizer's groups
  std::string name;     // optimizer state: the tensor's name in the parameter's state
  std::string param;    // the parameter's name
};

std::string PathId(const std::vector<std::string>& path) { return absl::StrJoin(path, "/"); }

// One rank's piece of `e`, unread; `keys` are that rank's optimizer state keys by position.
torch::Tensor PieceOf(const LazyArchive& archive, const ShardedEntry& e,
                      const std::vector<std::string>& keys) {
  std::optional<c10::IValue> piece =
      e.model ? archive.Find({e.id})
              : archive.Find({"optimizer", "state", keys.at(e.position), e.name});
  if (!piece || !piece->isTensor())
    throw std::runtime_error(absl::StrCat(archive.path(), ": has no piece of ", e.id));
  return piece->toTensor();
}

// The pieces of one entry as the ranks' files are read one after another: kept to be joined, or,
// with rows wanted, copied straight into those rows.
struct Gathered {
  std::vector<torch::Tensor> pieces;  // whole: every rank's
  torch::Tensor scalar;               // wanted: rank 0's piece when it is not a block of rows
  std::vector<int64_t> row_sizes;     // wanted: the first piece's sizes (a block of rows)
  torch::Tensor rows;                 // wanted: the rows so far
  int64_t offset = 0;                 // wanted: the next piece's first row in the whole
};

// Whether `e`'s rows go straight into the reader's parameter: a model entry whose parameter is
// given (PieceRows::into) with the rows' shape.
bool ReadsInto(const ShardedEntry& e, const std::vector<int64_t>& rows_shape) {
  return e.model && e.wanted != nullptr && e.wanted->into.defined() &&
         e.wanted->into.sizes() == c10::IntArrayRef(rows_shape);
}

// Reads what `e` needs of one rank's `piece` (unread, in `archive`): the whole piece to be
// joined, or, with rows wanted, those rows of it alone, copied into place at once.
void Gather(const ShardedEntry& e, const LazyArchive& archive, const torch::Tensor& piece,
            Gathered& g) {
  if (e.wanted == nullptr) {
    g.pieces.push_back(archive.Read(piece));
    return;
  }
  // State that is not per row (a step count) is rank 0's, as Join takes it.
  if (g.scalar.defined()) return;
  if (g.row_sizes.empty()) {
    if (piece.dim() == 0) {
      g.scalar = archive.Read(piece);
      return;
    }
    g.row_sizes = piece.sizes().vec();
  }
  // A block of rows of the first piece's width (a table's [rows, dim], or per-row state such as
  // row-wise Adagrad's [rows]).
  if (piece.dim() != static_cast<int64_t>(g.row_sizes.size()) ||
      piece.sizes().slice(1) != c10::IntArrayRef(g.row_sizes).slice(1)) {
    throw std::runtime_error(absl::StrCat("the pieces of ", e.id, " do not line up (",
                                          c10::str(piece.sizes()), " after ",
                                          c10::str(c10::IntArrayRef(g.row_sizes)), ")"));
  }
  const int64_t rows = (*e.shape)[0];
  if (!g.rows.defined()) {
    std::vector<int64_t> size = g.row_sizes;
    size[0] = e.wanted->count;
    if (ReadsInto(e, size)) {
      torch::NoGradGuard no_grad;
      g.rows = e.wanted->into.detach();
    } else {
      g.rows = torch::empty(size, torch::TensorOptions().dtype(piece.dtype()));
    }
    g.rows.zero_();
  }
  // Rows [offset, offset + n) of the whole, cut to the whole's rows and to the wanted ones.
  const int64_t begin = std::max({g.offset, e.wanted->first, int64_t{0}});
  const int64_t end = std::min({g.offset + piece.size(0), e.wanted->first + e.wanted->count, rows});
  if (end > begin) {
    archive.ReadRowsInto(piece, begin - g.offset, end - begin,
                         g.rows.narrow(0, begin - e.wanted->first, end - begin));
  }
  g.offset += piece.size(0);
}

torch::Tensor Finish(const ShardedEntry& e, Gathered& g) {
  if (e.wanted == nullptr) return Join(g.pieces, e.shape);
  return g.scalar.defined() ? g.scalar : g.rows;
}

// position in the optimizer's groups -> its state key, in one rank's archive.
std::vector<std::string> OptimizerKeys(const LazyArchive& archive) {
  std::vector<std::string> keys;
  auto count = [&](const std::vector<std::string>& at) -> int64_t {
    std::optional<c10::IValue> v = archive.Find(at);
    if (!v || !v->isTensor()) return 0;
    return archive.Read(v->toTensor()).item<int64_t>();
  };
  const int64_t group_count = count({"optimizer", "param_groups", "param_groups/size"});
  for (int64_t g = 0; g < group_count; ++g) {
    const std::string group = absl::StrCat("param_groups/", g);
    const int64_t params = count({"optimizer", "param_groups", group, "params/size"});
    for (int64_t i = 0; i < params; ++i) {
      std::optional<c10::IValue> key =
          archive.Find({"optimizer", "param_groups", group, absl::StrCat("params/", i)});
      if (!key || !key->isString())
        throw std::runtime_error(absl::StrCat(archive.path(), ": optimizer state without keys"));
      keys.push_back(key->toStringRef());
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
                                   torch::Device device,
                                   const std::map<std::string, PieceRows>& wanted) {
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
  // Every rank's file is opened without reading its tensors (its layout alone), and checked
  // before anything is joined. Pieces are then read one entry at a time, so a reader holds what
  // it keeps and one entry's pieces: with rows wanted, only those rows of each piece are read.
  std::vector<std::unique_ptr<LazyArchive>> ranks;
  for (int64_t r = 0; r < meta.world_size; ++r) {
    const std::string file = absl::StrCat(dir, "/", ShardFileName(r, meta.world_size));
    if (!IsRegularFile(file)) {
      return absl::NotFoundError(absl::StrCat(file, ": missing; this sharded checkpoint has ",
                                              meta.world_size, " pieces, one per rank"));
    }
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<LazyArchive> a, LazyArchive::Open(file));
    KILN_RETURN_IF_ERROR(CheckCheckpointFormat(file, a->Find({"meta/format"})));
    std::optional<c10::IValue> run = a->Find({"fsdp/run"}), rank = a->Find({"fsdp/rank"});
    if (!run || !run->isString() || run->toStringRef() != meta.run || !rank || !rank->isInt() ||
        rank->toInt() != r) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": a piece of another checkpoint (not run ", meta.run, "'s rank ", r,
                       "); every piece must come from the same save"));
    }
    std::optional<c10::IValue> step = a->Find({"loop/global_step"});
    if (!step || !step->isInt() || step->toInt() != meta.step) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": written at step ", step && step->isInt() ? step->toInt() : -1, ", but ",
          meta_path, " is step ", meta.step, "'s; every piece must come from the same save"));
    }
    ranks.push_back(std::move(a));
  }
  const LazyArchive& first = *ranks[0];
  try {
    // What each rank holds a piece of, from rank 0's file.
    std::vector<ShardedEntry> entries;
    // Rows are wanted of a parameter of the whole's rows (another one is refused on loading).
    auto wanted_rows = [&](const std::string& name) -> const PieceRows* {
      auto it = wanted.find(name);
      auto shape = meta.shapes.find(name);
      if (it == wanted.end() || shape == meta.shapes.end() || shape->second.empty() ||
          shape->second[0] != it->second.whole)
        return nullptr;
      return &it->second;
    };
    std::vector<std::string> model_names;
    if (std::optional<c10::IValue> names = first.Find({"model/names"})) model_names = Lines(*names);
    for (size_t i = 0; i < model_names.size(); ++i) {
      auto shape = meta.shapes.find(model_names[i]);
      if (shape == meta.shapes.end()) continue;
      ShardedEntry e;
      e.id = absl::StrCat("model/", i);
      e.param = model_names[i];
      e.shape = &shape->second;
      e.wanted = wanted_rows(model_names[i]);
      entries.push_back(std::move(e));
    }
    std::vector<std::vector<std::string>> keys;  // each rank's optimizer state keys
    for (const auto& a : ranks) keys.push_back(OptimizerKeys(*a));
    if (std::optional<c10::IValue> opt_names = first.Find({"fsdp/optimizer_params"})) {
      std::vector<std::string> params = Lines(*opt_names);
      for (size_t i = 0; i < params.size() && i < keys[0].size(); ++i) {
        auto shape = meta.shapes.find(params[i]);
        std::optional<c10::IValue> param = first.Find({"optimizer", "state", keys[0][i]});
        if (shape == meta.shapes.end() || !param || !param->isObject()) continue;
        const auto type = param->toObjectRef().type();
        for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
          if (!param->toObjectRef().getSlot(slot).isTensor()) continue;
          ShardedEntry e;
          e.id = PathId({"optimizer", "state", keys[0][i], type->getAttributeName(slot)});
          e.shape = &shape->second;
          e.wanted = wanted_rows(params[i]);
          e.model = false;
          e.position = i;
          e.name = type->getAttributeName(slot);
          entries.push_back(std::move(e));
        }
      }
    }
    std::map<std::string, torch::Tensor> joined;
    std::string read_into;  // the parameters whose rows went straight into them
    for (const ShardedEntry& e : entries) {
      Gathered g;
      for (size_t r = 0; r < ranks.size(); ++r)
        Gather(e, *ranks[r], PieceOf(*ranks[r], e, keys[r]), g);
      // Pieces that do not make the whole's rows are not per row (row-wise Adagrad's empty
      // exp_avg): rank 0's, as it is, as Join takes them.
      if (e.wanted != nullptr && !g.scalar.defined() && g.offset < (*e.shape)[0]) {
        // A parameter's pieces always make its rows: short ones come from another checkpoint.
        if (e.model) {
          throw std::runtime_error(absl::StrCat("the pieces of ", e.param, " hold ", g.offset,
                                                " rows of its ", (*e.shape)[0]));
        }
        joined[e.id] = ranks[0]->Read(PieceOf(*ranks[0], e, keys[0]));
      } else if (!g.scalar.defined() &&
                 ReadsInto(e, g.rows.defined() ? g.rows.sizes().vec() : std::vector<int64_t>{})) {
        read_into += e.param + "\n";
        joined[e.id] = torch::empty({0});  // not in the archive: already where it goes
      } else {
        joined[e.id] = Finish(e, g);
      }
    }
    // The joined archive goes through a temporary file, not memory: rank 0's archive with the
    // joined tensors in place of its pieces, then the archive read back, are what a reader holds.
    std::string scratch = (std::filesystem::temp_directory_path() / "kiln-joined-XXXXXX").string();
    const int fd = ::mkstemp(scratch.data());
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat(dir, ": no temporary file to join the pieces in: ", std::strerror(errno)));
    }
    ::close(fd);
    struct Unlink {
      const std::string& path;
      ~Unlink() { ::unlink(path.c_str()); }
    } unlink_scratch{scratch};
    {
      torch::serialize::OutputArchive whole;
      first.CopyTo(whole, [&](const std::string& path) -> std::optional<torch::Tensor> {
        auto it = joined.find(path);
        if (it == joined.end()) return std::nullopt;
        return it->second;
      });
      joined.clear();
      if (!read_into.empty()) whole.write(kPiecesReadInto, c10::IValue(read_into));
      whole.save_to(scratch);
    }
    archive->load_from(scratch, device);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (IsOutOfMemory(e)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          dir,
          ": out of memory joining the pieces of this sharded checkpoint (a reader holds what it "
          "keeps of them and one tensor's pieces at a time)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": cannot join the pieces of this sharded checkpoint: ", ErrorLine(what)));
  }
  return absl::OkStatus();
}

}  // namespace kiln
