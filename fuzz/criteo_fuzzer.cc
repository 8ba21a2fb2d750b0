// libFuzzer target: Criteo-format click data (components/recsys/criteo_line.cc and criteo_file.cc,
// what data=criteo reads), plain or gzip: every input is rows or one error status, with bad lines
// skipped and counted or refused, never a crash, a leak or a row that breaks the tables' bounds;
// the rows a stream counts first are the rows read and skipped, and its epoch those rows.
#include <algorithm>
#include <string>
#include <vector>

#include "components/recsys/criteo_file.h"
#include "components/recsys/criteo_stream.h"
#include "fuzz/fuzz_input.h"
#include "lib/data/sampler.h"

namespace {

void CheckStream(const std::string& path, const kiln::recsys::CriteoReadOptions& options,
                 const kiln::recsys::CriteoRows& rows) {
  auto stream = kiln::recsys::CriteoStream::Open({path}, options, 3, "fuzz");
  if (!stream.ok()) __builtin_trap();
  auto sampler = (*stream)->StreamSampler(false, 0, 0, 1);
  std::vector<int64_t> order = sampler->EpochOrder(0);
  auto source = (*stream)->OpenEpoch(*sampler, 0, order, 0, 4);
  if (!source.ok()) __builtin_trap();
  int64_t next = 0;
  for (size_t b = 0; b < order.size(); b += 2) {
    std::vector<int64_t> batch(
        order.begin() + static_cast<ptrdiff_t>(b),
        order.begin() + static_cast<ptrdiff_t>(std::min(b + 2, order.size())));
    int64_t skipped = 0;
    auto got = (*source)->GetStacked(batch, &skipped);
    if (!got.ok() || !got->has_value()) __builtin_trap();
    const torch::Tensor& input = (*got)->input;
    if (input.size(0) + skipped != static_cast<int64_t>(batch.size())) __builtin_trap();
    for (int64_t i = 0; i < input.size(0); ++i, ++next) {
      if (next >= rows.features.size(0) || !input[i].equal(rows.features[next].to(torch::kInt64)) ||
          (*got)->target[i].item<float>() != rows.labels[next].item<float>())
        __builtin_trap();
    }
  }
  if (next != rows.features.size(0)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The parser alone, on the input as one line, with and without the label.
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::recsys::CriteoRow row;
  for (bool label_optional : {false, true}) {
    std::string problem = kiln::recsys::ParseCriteoLine(text, label_optional, &row);
    if (problem.empty() && row.label != 0 && row.label != 1 && !label_optional) __builtin_trap();
  }
  kiln::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  kiln::recsys::CriteoReadOptions options;
  options.num_embeddings = {1,  2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31, 37,
                            41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97};
  for (auto bad : {kiln::recsys::BadLines::kSkip, kiln::recsys::BadLines::kError}) {
    options.bad_lines = bad;
    options.label_optional = bad == kiln::recsys::BadLines::kSkip;
    auto rows = kiln::recsys::ReadCriteoFile(file.path(), options);
    if (!rows.ok()) continue;
    // What data.stream counts first: every row read or skipped, no more; and an epoch of the
    // stream in storage order (batches of 2) is those rows, the bad ones skipped.
    if (bad == kiln::recsys::BadLines::kSkip) {
      auto counted = kiln::recsys::CountCriteoRows(file.path(), 0);
      if (!counted.ok() || *counted != rows->features.size(0) + rows->skipped) __builtin_trap();
      // A stream's epoch starts a reader thread (about 0.5 ms): a quarter of the inputs, by
      // length, keep the suite's bounded run near its old time.
      if (*counted > 0 && size % 4 == 0) CheckStream(file.path(), options, *rows);
    }
    auto features = rows->features.accessor<int32_t, 2>();
    for (int64_t i = 0; i < features.size(0); ++i) {
      for (int j = 0; j < kiln::recsys::kCriteoDense; ++j)
        if (features[i][j] < 0) __builtin_trap();
      for (int j = 0; j < kiln::recsys::kCriteoSparse; ++j) {
        int32_t index = features[i][kiln::recsys::kCriteoDense + j];
        if (index < 0 || index >= options.num_embeddings[static_cast<size_t>(j)]) __builtin_trap();
      }
    }
  }
  return 0;
}
