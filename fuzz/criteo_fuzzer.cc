// libFuzzer target: Criteo-format click data (components/recsys/criteo_line.cc and criteo_file.cc,
// what data=criteo reads), plain or gzip: every input is rows or one error status, with bad lines
// skipped and counted or refused, never a crash, a leak or a row that breaks the tables' bounds;
// the rows a stream counts first are the rows read and skipped.
#include "components/recsys/criteo_file.h"
#include "fuzz/fuzz_input.h"

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
    // What data.stream counts first: every row read or skipped, no more.
    if (bad == kiln::recsys::BadLines::kSkip) {
      auto counted = kiln::recsys::CountCriteoRows(file.path(), 0);
      if (!counted.ok() || *counted != rows->features.size(0) + rows->skipped) __builtin_trap();
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
