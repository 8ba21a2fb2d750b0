// Batching for variable-length sequences (text, audio features): padding collation with lengths
// and masks, and length bucketing, so a batch holds sequences of similar length and wastes little
// on padding.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"

namespace kiln::data {

// Pads inputs along their first dimension (token ids [T], features [T, F]) to the longest one with
// `pad`, keeping their dtype: input [B, T, ...], lengths [B], mask [B, T] (true at real positions);
// targets are stacked when they have one shape, else 1-d targets are padded with `target_pad`
// (`pad` when not given). Packed examples' segments are padded with -1 (a sequence of its own).
absl::StatusOr<Batch> PadCollate(std::vector<Example>& examples, int64_t pad,
                                 std::optional<int64_t> target_pad = std::nullopt);

// fairseq-style bucketing: cuts `order` into windows of `window_batches` batches, sorts each window
// by dataset.Length(index), and shuffles the full batches with (seed, epoch); a last partial batch
// stays last, so batch boundaries still fall every `batch_size` samples.
std::vector<int64_t> BucketByLength(std::vector<int64_t> order, const Dataset& dataset,
                                    int64_t batch_size, int64_t window_batches, uint64_t seed,
                                    int64_t epoch);

// SortaGrad (DeepSpeech 2): the whole of `order` sorted by dataset.Length(index), shortest first,
// ties kept in their order; the batches are not shuffled. A curriculum for the first epochs of
// CTC training, whose alignments are easier to find on short utterances.
std::vector<int64_t> SortByLength(std::vector<int64_t> order, const Dataset& dataset);

// The loader hook for BucketByLength (LoaderOptions::batch_order).
BatchOrderFn LengthBucketing(int64_t batch_size, int64_t window_batches, uint64_t seed);

// SortaGrad as a loader hook: epochs before `sorted_epochs` use SortByLength, later ones `then`
// (null: the sampler's order). With sorted_epochs <= 0 it is `then` itself.
BatchOrderFn SortaGrad(int64_t sorted_epochs, BatchOrderFn then);

}  // namespace kiln::data
