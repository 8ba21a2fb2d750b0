// libFuzzer target: CIFAR binary batches (components/vision/cifar_file.cc, what the cifar data
// module reads), gzip or raw, in the CIFAR-10 layout and both CIFAR-100 ones (coarse, fine).
#include "components/vision/cifar_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  for (kiln::data::CifarRecordLayout layout :
       {kiln::data::CifarRecordLayout{1, 0, 10}, kiln::data::CifarRecordLayout{2, 0, 20},
        kiln::data::CifarRecordLayout{2, 1, 100}}) {
    auto read = kiln::data::ReadCifarBatches({file.path()}, layout);
    if (read.ok() && read->first.size(0) != read->second.size(0)) __builtin_trap();
  }
  return 0;
}
