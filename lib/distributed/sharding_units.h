// The seam between models and fully sharded data parallelism (fully_sharded.h). A model that can
// be sharded unit by unit (a transformer's blocks) says which submodules are its units, and runs
// each one through RunUnit, which lets the sharding gather the unit's parameters before its forward
// and hand them back after; with nothing installed, RunUnit is the plain call. The hooks are per
// unit module and per process (one training thread).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace kiln::distributed {

// What a shardable model implements beside torch::nn::Module: its units, in forward order.
class ShardingUnits {
 public:
  virtual ~ShardingUnits();
  virtual std::vector<std::shared_ptr<torch::nn::Module>> sharding_units() const = 0;
};

class UnitHooks {
 public:
  virtual ~UnitHooks();
  // Before the unit's forward: its parameters hold their full values afterwards. Returns the
  // input the unit computes from (the same values; the hooks may mark it to learn when the
  // backward is through the unit).
  virtual torch::Tensor BeforeForward(const torch::nn::Module& unit,
                                      const torch::Tensor& input) = 0;
  // After it, with its output: what the backward will need of the unit is arranged here.
  virtual void AfterForward(const torch::nn::Module& unit, const torch::Tensor& output) = 0;
};

// Installs (or, with null, removes) `hooks` for `unit`.
void SetUnitHooks(const torch::nn::Module* unit, UnitHooks* hooks);

// fn(x), with the unit's hooks around it when some are installed.
torch::Tensor RunUnit(const torch::nn::Module& unit,
                      const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                      const torch::Tensor& x);

// Building a model already in pieces (trainer.strategy=fsdp on several workers): a model larger
// than one worker's memory never exists whole. With a placement set, a model calls
// KeepOwnPieces(unit) right after it builds each unit: every parameter of the unit then holds
// this rank's rows only (ceil(rows / N) of them, zero past the whole's end), as fully sharded
// data parallelism would have cut it, and the next unit is built in the memory this one freed.
// Every rank builds from the same seed, so the pieces are those of one whole model.
struct BuildPlacement {
  int rank = 0;
  int world_size = 1;
};
void SetBuildPlacement(std::optional<BuildPlacement> placement);
void KeepOwnPieces(torch::nn::Module& unit);

// What a parameter KeepOwnPieces cut holds: rows [first, first + count) of a whole of `shape`
// (those past its end zero), cut for `world_size` ranks. nullopt: the parameter is whole.
struct BuiltPiece {
  std::vector<int64_t> shape;
  int64_t first = 0, count = 0;
  int world_size = 1;
};
std::optional<BuiltPiece> BuiltPieceOf(const torch::Tensor& param);
// The parameter is whole again (fsdp gathered it for good): BuiltPieceOf forgets it.
void ForgetBuiltPiece(const torch::Tensor& param);

// Initializes `param` as `init` would its whole value: for a piece, `init` fills a whole
// temporary (drawing from the generator exactly as for the whole parameter) and the piece keeps
// its rows; for a whole parameter, `init(param)`. The models' weight initialization goes through
// it, so a model built in pieces starts with the values a whole one would.
void InitWhole(torch::Tensor& param, const std::function<void(torch::Tensor&)>& init);

// The rows each rank holds of `rows` cut along dimension 0 (fsdp's pieces, row-wise tables):
// ceil(rows / world_size), the last ranks' pieces padded.
inline int64_t RowsPerRank(int64_t rows, int world_size) {
  return (rows + world_size - 1) / world_size;
}

// This rank's rows of `whole` (dimension 0; a scalar counts as one row): RowsPerRank of them from
// rank * that on, zero past the whole's end.
torch::Tensor RowsOfRank(const torch::Tensor& whole, int rank, int world_size);

}  // namespace kiln::distributed
