#include "lib/weights/sharded_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/error_text.h"
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

// A tensor each rank holds a piece of: a parameter, or a tensor of its optimizer state.
struct ShardedEntry {
  std::string id;  // "model/I", or "optimizer/state/KEY/NAME" with rank 0's KEY (PathId's form)
  const std::vector<int64_t>* shape = nullptr;  // the parameter's whole shape
  const PieceRows* wanted = nullptr;            // the rows the reader keeps; null: the whole
  bool model = true;
  size_t position = 0;  // optimizer state: the parameter's position in the optimizer's groups
  std::string name;     // optimizer state: the tensor's name in the parameter's state
};

std::string PathId(const std::vector<std::string>& path) { return absl::StrJoin(path, "/"); }

// One rank's piece of `e`; `keys` are that rank's optimizer state keys by position.
torch::Tensor ReadPiece(torch::serialize::InputArchive& archive, const ShardedEntry& e,
                        const std::vector<std::string>& keys) {
  torch::Tensor piece;
  if (e.model) {
    archive.read(e.id, piece);
    return piece;
  }
  torch::serialize::InputArchive opt, state, param;
  archive.read("optimizer", opt);
  opt.read("state", state);
  state.read(keys.at(e.position), param);
  param.read(e.name, piece);
  return piece;
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

// Keeps what `e` needs of one rank's piece. Wanted rows are copied out at once, so no piece of
// them outlives its rank's file.
void Gather(const ShardedEntry& e, const torch::Tensor& piece, Gathered& g) {
  if (e.wanted == nullptr) {
    g.pieces.push_back(piece);
    return;
  }
  // State that is not per row (a step count) is rank 0's, as Join takes it.
  if (g.scalar.defined()) return;
  if (g.row_sizes.empty()) {
    if (piece.dim() == 0) {
      g.scalar = piece.clone();
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
    g.rows = torch::zeros(size, piece.options());
  }
  // Rows [offset, offset + n) of the whole, cut to the whole's rows and to the wanted ones.
  const int64_t begin = std::max({g.offset, e.wanted->first, int64_t{0}});
  const int64_t end = std::min({g.offset + piece.size(0), e.wanted->first + e.wanted->count, rows});
  if (end > begin) {
    g.rows.narrow(0, begin - e.wanted->first, end - begin)
        .copy_(piece.narrow(0, begin - g.offset, end - begin));
  }
  g.offset += piece.size(0);
}

torch::Tensor Finish(const ShardedEntry& e, Gathered& g) {
  if (e.wanted == nullptr) return Join(g.pieces, e.shape);
  return g.scalar.defined() ? g.scalar : g.rows;
}

// Copies `in` (rank 0's archive) into `out`, with the joined tensors in place of rank 0's pieces.
void Copy(torch::serialize::InputArchive& in, torch::serialize::OutputArchive& out,
          const std::vector<std::string>& path,
          const std::map<std::string, torch::Tensor>& joined) {
  for (const std::string& key : in.keys()) {
    torch::Tensor t;
    torch::serialize::InputArchive sub;
    c10::IValue value;
    std::vector<std::string> here = path;
    here.push_back(key);
    if (in.try_read(key, t)) {
      auto it = joined.find(PathId(here));
      out.write(key, it != joined.end() ? it->second : t);
    } else if (in.try_read(key, sub)) {
      torch::serialize::OutputArchive nested(out.compilation_unit());
      Copy(sub, nested, here, joined);
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
  // The ranks' files one after another: rank 0's is kept (the layout of everything else), each
  // other one is read, gathered from and dropped, so at most two are held at a time.
  auto open = [&](int64_t r, torch::serialize::InputArchive& a) -> absl::Status {
    const std::string file = absl::StrCat(dir, "/", ShardFileName(r, meta.world_size));
    if (!IsRegularFile(file)) {
      return absl::NotFoundError(absl::StrCat(file, ": missing; this sharded checkpoint has ",
                                              meta.world_size, " pieces, one per rank"));
    }
    KILN_RETURN_IF_ERROR(ReadCheckpoint(file, &a, device));
    c10::IValue run, rank, step;
    if (!a.try_read("fsdp/run", run) || !run.isString() || run.toStringRef() != meta.run ||
        !a.try_read("fsdp/rank", rank) || !rank.isInt() || rank.toInt() != r) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": a piece of another checkpoint (not run ", meta.run, "'s rank ", r,
                       "); every piece must come from the same save"));
    }
    if (!a.try_read("loop/global_step", step) || !step.isInt() || step.toInt() != meta.step) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": written at step ", step.isInt() ? step.toInt() : -1, ", but ", meta_path,
          " is step ", meta.step, "'s; every piece must come from the same save"));
    }
    return absl::OkStatus();
  };
  torch::serialize::InputArchive first;
  KILN_RETURN_IF_ERROR(open(0, first));
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
    c10::IValue names;
    std::vector<std::string> model_names;
    if (first.try_read("model/names", names)) model_names = Lines(names);
    for (size_t i = 0; i < model_names.size(); ++i) {
      auto shape = meta.shapes.find(model_names[i]);
      if (shape == meta.shapes.end()) continue;
      ShardedEntry e;
      e.id = absl::StrCat("model/", i);
      e.shape = &shape->second;
      e.wanted = wanted_rows(model_names[i]);
      entries.push_back(std::move(e));
    }
    c10::IValue opt_names;
    const std::vector<std::string> first_keys = OptimizerKeys(first);
    if (first.try_read("fsdp/optimizer_params", opt_names)) {
      std::vector<std::string> params = Lines(opt_names);
      torch::serialize::InputArchive opt, state;
      const bool has_state = first.try_read("optimizer", opt) && opt.try_read("state", state);
      for (size_t i = 0; has_state && i < params.size() && i < first_keys.size(); ++i) {
        auto shape = meta.shapes.find(params[i]);
        torch::serialize::InputArchive param;
        if (shape == meta.shapes.end() || !state.try_read(first_keys[i], param)) continue;
        for (const std::string& name : param.keys()) {
          torch::Tensor t;
          if (!param.try_read(name, t)) continue;
          ShardedEntry e;
          e.id = PathId({"optimizer", "state", first_keys[i], name});
          e.shape = &shape->second;
          e.wanted = wanted_rows(params[i]);
          e.model = false;
          e.position = i;
          e.name = name;
          entries.push_back(std::move(e));
        }
      }
    }
    // One rank's file at a time: with rows wanted, rank 0's is dropped after its pieces are
    // gathered and read again for the rest of the checkpoint at the end.
    const bool drop_first = !wanted.empty();
    std::vector<Gathered> gathered(entries.size());
    for (int64_t r = 0; r < meta.world_size; ++r) {
      torch::serialize::InputArchive other;
      if (r > 0) KILN_RETURN_IF_ERROR(open(r, other));
      torch::serialize::InputArchive& a = r == 0 ? first : other;
      const std::vector<std::string> keys = r == 0 ? first_keys : OptimizerKeys(a);
      for (size_t i = 0; i < entries.size(); ++i)
        Gather(entries[i], ReadPiece(a, entries[i], keys), gathered[i]);
      if (r == 0 && drop_first) first = torch::serialize::InputArchive();
    }
    std::map<std::string, torch::Tensor> joined;
    for (size_t i = 0; i < entries.size(); ++i) {
      joined[entries[i].id] = Finish(entries[i], gathered[i]);
      gathered[i] = Gathered();
    }
    if (drop_first) KILN_RETURN_IF_ERROR(open(0, first));
    // The joined archive goes through a temporary file, not memory: the pieces and the joined
    // tensors, then the joined tensors alone, then the archive read back are what a reader holds.
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
      Copy(first, whole, {}, joined);
      joined.clear();
      first =
          torch::serialize::InputArchive();  // rank 0's other tensors stay referenced by `whole`
      whole.save_to(scratch);
    }
    archive->load_from(scratch, device);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (IsOutOfMemory(e)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          dir,
          ": out of memory joining the pieces of this sharded checkpoint (a reader holds "
          "one or two ranks' files and what it keeps of them at a time)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": cannot join the pieces of this sharded checkpoint: ", ErrorLine(what)));
  }
  return absl::OkStatus();
}

}  // namespace kiln
