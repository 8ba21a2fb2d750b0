// libFuzzer target: the meta.json of a sharded checkpoint (lib/weights/sharded_checkpoint.cc:
// ReadShardedCheckpoint parses it, checks its pieces against it and joins them, whole or as the
// rows a worker keeps), as `ckpt_path=`,
// `kiln export` and evaluation take such folders from outside. The pieces are two valid ones this
// target writes once; the input is the description that goes beside them.
#include <sys/stat.h>

#include <cstdlib>

#include "fuzz/fuzz_input.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/sharded_checkpoint.h"

namespace {

kiln::ShardedCheckpointMeta Meta() {
  kiln::ShardedCheckpointMeta meta;
  meta.world_size = 2;
  meta.run = "fuzz";
  meta.step = 3;
  meta.shapes = {{"fc.weight", {3, 2}}, {"fc.bias", {3}}};
  return meta;
}

// Rank r's piece of fc (3 rows: 2 per rank, the last one padded) in `dir`.
bool WritePieces(const std::string& dir) {
  const kiln::ShardedCheckpointMeta meta = Meta();
  for (int64_t r = 0; r < 2; ++r) {
    std::map<std::string, torch::Tensor> state{
        {"fc.weight", torch::full({2, 2}, static_cast<double>(r + 1))},
        {"fc.bias", torch::full({2}, static_cast<double>(r + 1))}};
    auto written = kiln::WriteCheckpoint(
        dir + "/" + kiln::ShardFileName(r, 2), [&](torch::serialize::OutputArchive& a) {
          kiln::WriteCheckpointMeta(a, "mlp", "");
          kiln::WriteModelState(state, a);
          a.write("loop/global_step", c10::IValue(meta.step));
          kiln::WriteShardKeys(a, meta, r, {"fc.weight", "fc.bias"});
        });
    if (!written.ok()) return false;
  }
  return true;
}

}  // namespace

// Seed: the meta.json kiln writes for those pieces.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  std::string scratch = kiln::fuzz::ScratchDir();
  auto written = kiln::WriteShardedCheckpointMeta(scratch, Meta());
  std::exit(written.ok() &&
                    std::system(("cp '" + scratch + "/meta.json' '" + dir + "/'").c_str()) == 0
                ? 0
                : 1);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = kiln::fuzz::ScratchDir() + "/last.ckpt";
    ::mkdir(d.c_str(), 0755);
    if (!WritePieces(d)) std::abort();
    return d;
  }();
  kiln::fuzz::WriteScratchFile("last.ckpt/meta.json", data, size);
  torch::serialize::InputArchive archive;
  // Inputs of odd length are read as a worker holding rows 1 and 2 of fc.weight would read them.
  std::map<std::string, kiln::PieceRows> wanted;
  if (size % 2 == 1) wanted["fc.weight"] = kiln::PieceRows{1, 2, 3};
  if (kiln::ReadShardedCheckpoint(dir, &archive, torch::kCPU, wanted).ok()) {
    auto state = kiln::ReadModelState(archive, dir);
    (void)state;
  }
  return 0;
}
