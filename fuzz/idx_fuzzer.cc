// libFuzzer target: IDX files (components/vision/idx_file.cc, what idx_images reads), gzip or raw,
// as image (3 dimensions) and label (1 dimension) files: every input is a tensor or an error
// status, never a crash, a leak, a hang or an allocation beyond what the file holds.
#include "components/vision/idx_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  for (int dims : {3, 1}) {
    auto tensor = kiln::data::ReadIdx(file.path(), dims);
    if (tensor.ok() && tensor->numel() > static_cast<int64_t>(size) * 1100)
      __builtin_trap();  // gzip at most ~1032:1
  }
  return 0;
}
