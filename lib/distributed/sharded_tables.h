// Embedding tables sharded across workers (model parallelism for the tables, as TorchRec's
// table-wise and row-wise sharding), while the rest of the model stays data-parallel.
//
// A model with tables says which they are (EmbeddingTables) and looks them up through
// LookupTables. Alone, that is one lookup per table. With ShardedTables installed, each table's
// parameter holds only this rank's piece: a whole table on the rank it was placed on (table-wise;
// an empty [0, dim] piece elsewhere) or a contiguous block of ceil(rows / N) rows, zero-padded
// (row-wise; the layout of fsdp's pieces, so sharded checkpoints join the same way). A lookup sends
// every (table, row) of this rank's batch to the rank holding the row (all-to-all of the ids),
// which reads the rows and sends them back (all-to-all of the rows); the backward sends the rows'
// gradients to their holders the reverse way, where they become the sparse gradient of the piece,
// averaged over ranks as data parallel averages the dense gradients. No rank ever makes a gradient
// of a whole table, and no table's gradient is all-reduced.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/distributed/process_group.h"

namespace kiln::distributed {

// What a model with embedding tables implements beside torch::nn::Module.
class EmbeddingTables {
 public:
  virtual ~EmbeddingTables();
  // The tables, in the order of the id columns LookupTables is given.
  virtual std::vector<torch::nn::Embedding> embedding_tables() const = 0;
  // Their whole rows (a table BuildTables made may hold a piece).
  virtual std::vector<int64_t> table_rows() const = 0;
};

// ids int64 [B, F] (column j indexes table j) -> the rows [B, F, dim].
torch::Tensor LookupTables(const EmbeddingTables& owner, const torch::Tensor& ids);

enum class TableShardingKind {
  kAuto,       // row-wise for a table larger than an even share of all tables, table-wise else
  kTableWise,  // whole tables, placed to even out the ranks' bytes (largest first)
  kRowWise,    // every table in N row blocks
};
// trainer.table_sharding's value (auto, table_wise, row_wise; the option's schema has checked it).
inline TableShardingKind TableShardingKindNamed(const std::string& name) {
  return name == "row_wise"     ? TableShardingKind::kRowWise
         : name == "table_wise" ? TableShardingKind::kTableWise
                                : TableShardingKind::kAuto;
}

// Where a worker's tables go: set by each worker of a multi-worker fit before its model is built,
// so that BuildTables makes only that worker's pieces and no worker ever holds a whole table
// (tables larger than one worker's memory). Unset (nullopt): whole tables.
struct TablePlacement {
  int rank = 0;
  int world_size = 1;
  TableShardingKind kind = TableShardingKind::kAuto;
};
void SetTablePlacement(std::optional<TablePlacement> placement);

// A model's tables of `rows` x `dim`: whole, or, with a placement set and `sparse`, this worker's
// pieces (as ShardedTables cuts them). `init(table, first_row, out)` fills `out` with the initial
// values of the table's rows from first_row on; it must give the same values whether asked for a
// whole table or a piece.
std::vector<torch::nn::Embedding> BuildTables(
    const std::vector<int64_t>& rows, int64_t dim, bool sparse,
    const std::function<void(size_t, int64_t, torch::Tensor)>& init);

// The rows of its whole table that `param` holds, when it is a table piece: [first, first + count)
// of `rows`, those past the end zero (row-wise: a block; table-wise: all rows on the table's
// rank, none elsewhere). Loading a checkpoint into a sharded model reads and cuts by it.
struct TableRows {
  int64_t first = 0, count = 0, rows = 0;
};
std::optional<TableRows> PieceRowsOf(const torch::Tensor& param);

class ShardedTables {
 public:
  // Cuts `owner`'s tables (`model` is the module holding them, for the parameters' names) into
  // this rank's pieces and installs the sharded lookup. The tables must give sparse gradients and
  // share one width; every rank must hold the same whole values beforehand (the same seed, or a
  // checkpoint).
  static absl::StatusOr<std::unique_ptr<ShardedTables>> Create(std::shared_ptr<ProcessGroup> group,
                                                               torch::nn::Module& model,
                                                               const EmbeddingTables& owner,
                                                               TableShardingKind kind);
  ~ShardedTables();

  // The sharded lookup (LookupTables calls it while installed).
  torch::Tensor Lookup(const torch::Tensor& ids);
  // Every table whole on every rank again, the plain lookup back (after fit).
  absl::Status Unshard();
  // Each table's whole shape by parameter name (a sharded checkpoint's description).
  std::map<std::string, std::vector<int64_t>> whole_shapes() const;
  // The tables' parameters: each rank holds its own piece of them, so data parallel neither
  // compares, broadcasts nor reduces them.
  std::set<const void*> parameters() const;
  // Cuts whole per-row optimizer state (dimension 0 of the table's rows, as row-wise Adagrad's
  // accumulators), restored from a checkpoint, to this rank's rows.
  void ShardState(const std::function<std::vector<torch::Tensor*>(const torch::Tensor&)>& state_of);
  // One line: where the tables went, and the bytes this rank holds of them.
  std::string Describe() const;
  // Bytes of table rows this rank holds, and of all tables whole.
  int64_t local_bytes() const;
  int64_t whole_bytes() const;

 private:
  struct Table;
  ShardedTables(std::shared_ptr<ProcessGroup> group, const EmbeddingTables& owner);

  std::shared_ptr<ProcessGroup> group_;
  const EmbeddingTables& owner_;
  std::vector<Table> tables_;
  int64_t dim_ = 0;
  // Per table (as tensors, for the lookup's vector arithmetic): rows per rank (row-wise; 0:
  // table-wise) and the rank of a table-wise table.
  torch::Tensor block_, placed_;
};

}  // namespace kiln::distributed
