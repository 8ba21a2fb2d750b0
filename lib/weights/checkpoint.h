// Checkpoint files: LibTorch archives written atomically (temporary file, fsync, rename, fsync of
// the folder), so a crash mid-write never damages the previous checkpoint.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// Builds the archive with `fill`, then writes it to `path` atomically.
absl::Status WriteCheckpoint(const std::string& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill);
// Loads `path` with every tensor on `device` (the CPU by default, so that a checkpoint written on a
// GPU loads anywhere); a missing, truncated or foreign file is a one-line error naming the file.
absl::Status ReadCheckpoint(const std::string& path, torch::serialize::InputArchive* archive,
                            torch::Device device = torch::kCPU);

// What every checkpoint holds first: the format, the kiln and LibTorch versions, the model's name
// and the resolved config.
void WriteCheckpointMeta(torch::serialize::OutputArchive& archive, const std::string& model_name,
                         const std::string& config_yaml);
// A module's parameters and buffers under their PyTorch names ("conv1.weight", "bn1.running_mean").
void WriteModelState(torch::nn::Module& module, torch::serialize::OutputArchive& archive);
// Named tensors stored as WriteModelState stores a module's.
void WriteModelState(const std::map<std::string, torch::Tensor>& state,
                     torch::serialize::OutputArchive& archive);
// LoRA on a base that the config loads from a file (model.pretrained, model.init_from): the
// trained parameters alone (the adapters) and the buffers, with `frozen_digest`, the digest of the
// frozen parameters they were trained beside (FrozenDigest of the whole model, taken once before
// training and any sharding), as "meta/frozen_digest", which LoadModelState checks.
void WriteTrainedModelState(torch::nn::Module& module, const std::string& frozen_digest,
                            torch::serialize::OutputArchive& archive);
// The frozen parameters' names, shapes and bits, as a short hex string (exact: integer sums of the
// bits, independent of threads and machines).
std::string FrozenDigest(torch::nn::Module& module);
// The digest a WriteTrainedModelState checkpoint holds; "" for a whole model's.
std::string StoredFrozenDigest(torch::serialize::InputArchive& archive);
// name -> tensor as stored by WriteModelState; an error names the file when there is none.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadModelState(
    torch::serialize::InputArchive& archive, const std::string& path);
// Copies `state` into the module; every parameter and buffer must be there with its shape, or be
// a piece (PieceRowsOf) whose whole tensor is there (a worker's piece of a sharded table).
// With `frozen_digest` (a WriteTrainedModelState checkpoint's), the frozen parameters may be
// missing from `state`, and they must be those the checkpoint was trained beside.
absl::Status LoadModelState(const std::map<std::string, torch::Tensor>& state,
                            torch::nn::Module& module, const std::string& path,
                            const std::string& frozen_digest = "");

// Rows [first, first + count) of a parameter's whole tensor (dimension 0), those past its end
// zero: the piece of it a reader holds (a worker's piece of a sharded table).
struct PieceRows {
  int64_t first = 0;
  int64_t count = 0;
  int64_t whole = 0;  // the whole tensor's rows
  // The parameter itself, when set: a sharded checkpoint's rows are read straight into it, and
  // the archive read holds none of them (ReadModelState gives an undefined tensor under its
  // name, which LoadModelState leaves alone), so resuming holds no second copy of the piece.
  torch::Tensor into;
};

// The rows of its whole tensor that `param` holds (a worker's piece of a sharded table), or
// nullopt when `param` is whole. Several-worker runs install distributed::PieceRowsOf
// (sharded_tables.h) here; none by default.
using PieceRowsOf = std::function<std::optional<PieceRows>(const torch::Tensor& param)>;
void SetPieceRowsOf(PieceRowsOf rows_of);
// ReadCheckpoint for loading into `module`: of a sharded checkpoint, each parameter `module` holds
// a piece of (PieceRowsOf), and its optimizer state per row, is read as that piece only.
absl::Status ReadCheckpointFor(const std::string& path, torch::nn::Module& module,
                               torch::serialize::InputArchive* archive,
                               torch::Device device = torch::kCPU);

// The checkpoint format version; readers refuse newer ones.
inline constexpr int64_t kCheckpointFormat = 1;
// A checkpoint's "meta/format" (nullopt: it has none), checked: a one-line error naming `path`
// for a file that is not a kiln checkpoint or comes from a newer kiln.
absl::Status CheckCheckpointFormat(const std::string& path,
                                   const std::optional<c10::IValue>& format);

}  // namespace kiln
