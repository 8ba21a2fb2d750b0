// libFuzzer target: kiln checkpoints (lib/weights/checkpoint.cc: ReadCheckpoint checks the archive
// and its header, ReadModelState reads the model's tensors), as `--resume`, `--weights` and
// `kiln export` take them from outside; and the same bytes opened without reading their tensors
// (lib/weights/lazy_archive.cc, how a sharded checkpoint's pieces are read), then copied whole,
// every tensor read from the file and a few rows of each alone.
#include <cstdlib>

#include "fuzz/fuzz_input.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/lazy_archive.h"

// Seeds: checkpoints as kiln writes them (meta, then a model's weights; and one without weights).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  torch::manual_seed(0);
  std::map<std::string, torch::Tensor> state{{"fc.weight", torch::randn({3, 2})},
                                             {"fc.bias", torch::zeros({3})},
                                             {"bn.num_batches_tracked", torch::tensor(int64_t{7})}};
  auto full = kiln::WriteCheckpoint(
      std::string(dir) + "/model.ckpt", [&](torch::serialize::OutputArchive& a) {
        kiln::WriteCheckpointMeta(a, "mlp", "model:\n  _target_: mlp\n");
        kiln::WriteModelState(state, a);
      });
  auto meta = kiln::WriteCheckpoint(
      std::string(dir) + "/meta_only.ckpt",
      [&](torch::serialize::OutputArchive& a) { kiln::WriteCheckpointMeta(a, "cnn", ""); });
  std::exit(full.ok() && meta.ok() ? 0 : 1);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  torch::serialize::InputArchive archive;
  if (kiln::ReadCheckpoint(file.path(), &archive).ok()) {
    auto state = kiln::ReadModelState(archive, file.path());
    (void)state;
  }
  auto lazy = kiln::LazyArchive::Open(file.path());
  if (!lazy.ok()) return 0;
  try {
    torch::serialize::OutputArchive copy;
    (*lazy)->CopyTo(copy, [&](const std::string&) { return std::nullopt; });
    for (int i = 0; i < 4; ++i) {
      std::optional<c10::IValue> t = (*lazy)->Find({"model/" + std::to_string(i)});
      if (t && t->isTensor() && t->toTensor().dim() > 0 && t->toTensor().size(0) > 1)
        (void)(*lazy)->ReadRows(t->toTensor(), 1, 1);
    }
  } catch (const std::exception&) {
    // A tensor whose bytes are not in the file: the readers turn this into one line.
  }
  return 0;
}
