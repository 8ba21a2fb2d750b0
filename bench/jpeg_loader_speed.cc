// Images/s of a kiln data module's training loader: decode + random_resized_crop 224 +
// horizontal_flip + to_tensor + normalize into batches of 128, as bench/jpeg_speed.sh compares
// with torchvision's ImageFolder + DataLoader. The module's config is YAML on the command line.
//   jpeg_loader_speed 'DATA_YAML' BATCHES ROUNDS
// prints one line per round: "images_per_s=N round=K".
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "lib/config/yaml_io.h"
#include "lib/data/datamodule.h"
#include "lib/data/loader.h"
#include "lib/data/sampler.h"
#include "lib/registry/registry.h"
#include "lib/trainer/process_settings.h"

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 4) {
    std::fprintf(stderr, "usage: jpeg_loader_speed 'DATA_YAML' BATCHES ROUNDS\n");
    return 2;
  }
  torch::set_num_threads(1);  // the loader's threads do the work; LibTorch ops inside stay serial
  KeepFreedMemoryForReuse();  // what kiln train sets (mallopt); torchvision runs with the same
                              // tunables
  auto node = config::ParseYaml(argv[1], "data.yaml");
  if (!node.ok()) {
    std::fprintf(stderr, "%s\n", std::string(node.status().message()).c_str());
    return 2;
  }
  auto dm = Registry<data::DataModule>::Get().Instantiate(config::Config(*node, "data"));
  if (!dm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dm.status().message()).c_str());
    return 2;
  }
  absl::Status status = (*dm)->PrepareData();
  if (status.ok()) status = (*dm)->Setup(data::Stage::kFit);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 1;
  }
  auto train = (*dm)->train_dataset();
  data::LoaderOptions options = (*dm)->loader_options();
  data::DataLoader loader(train, data::SamplerFor(*train, /*shuffle=*/true, 1), options);
  const int64_t batches = std::atoll(argv[2]);
  const int rounds = std::atoi(argv[3]);
  for (int round = 0; round < rounds; ++round) {
    // One warm-up batch (threads, first file reads), then `batches` timed.
    std::chrono::steady_clock::time_point start;
    int64_t images = 0, seen = 0;
    status = loader.Run(round, 0, batches + 1, [&](data::Batch& batch) -> absl::StatusOr<bool> {
      if (seen++ == 0) {
        start = std::chrono::steady_clock::now();
      } else {
        images += batch.size();
      }
      return true;
    });
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
      return 1;
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("images_per_s=%.1f round=%d\n", static_cast<double>(images) / seconds, round);
    std::fflush(stdout);
  }
  return 0;
}
