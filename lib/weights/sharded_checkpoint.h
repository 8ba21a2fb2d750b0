// Sharded checkpoints (trainer.strategy=fsdp): a folder in place of the checkpoint file, holding
// one ordinary kiln checkpoint per rank (rank-R-of-N.ckpt: that rank's pieces of every parameter
// and of the optimizer state, dimension 0 split in N zero-padded pieces, and everything else as a
// one-file checkpoint holds it) and meta.json, which names the run, the step, the world size and
// each parameter's whole shape. Each rank writes its own file; nothing is gathered to write.
//
// Reading one (ReadCheckpoint does it for a folder) consolidates the pieces into the archive a
// one-file checkpoint of the whole model would be, so resuming at another world size, `kiln
// export` and evaluation read it as they read any checkpoint. A worker that holds pieces of sharded
// tables reads those as its pieces only, straight into its parameters (ReadCheckpointFor).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/weights/checkpoint.h"

namespace kiln {

struct ShardedCheckpointMeta {
  int64_t world_size = 1;
  std::string run;   // the same in every rank's file: shards of one save
  int64_t step = 0;  // the optimizer step the checkpoint was written at
  std::map<std::string, std::vector<int64_t>> shapes;  // parameter -> whole shape
};

std::string ShardFileName(int64_t rank, int64_t world_size);
// `path` is a folder with a meta.json.
bool IsShardedCheckpoint(const std::string& path);
absl::Status WriteShardedCheckpointMeta(const std::string& dir, const ShardedCheckpointMeta& meta);
// Beside the usual contents, each rank's file holds these (see SaveFitCheckpoint's `extra`).
void WriteShardKeys(torch::serialize::OutputArchive& archive, const ShardedCheckpointMeta& meta,
                    int64_t rank, const std::vector<std::string>& optimizer_params);
// The whole checkpoint from `dir`'s pieces, with every tensor on `device`; a parameter named in
// `wanted`, and its optimizer state per row, as those rows only. The ranks' files are opened
// without reading their tensors (lazy_archive.h) and the pieces read one tensor at a time, so a
// reader holds what it keeps and one tensor's pieces, and a reader of rows reads only those rows
// of each piece. A missing piece, one from another run or step, or a meta.json that does not
// parse is a one-line error naming the file.
// In the archive ReadShardedCheckpoint gives: the parameters (one a line) whose rows went
// straight into the reader's own tensors (PieceRows::into) and are not in it.
inline constexpr char kPiecesReadInto[] = "pieces/read_into";
absl::Status ReadShardedCheckpoint(const std::string& dir, torch::serialize::InputArchive* archive,
                                   torch::Device device,
                                   const std::map<std::string, PieceRows>& wanted = {});

}  // namespace kiln
