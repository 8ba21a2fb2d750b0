// A float TorchScript export against its dynamic int8 twin (`kiln export format=torchscript` with
// and without quantize=dynamic_int8) on the test split of the run's data: accuracy for a
// classifier, cross-entropy per token for a language model, and inference time over the whole
// split, the two interleaved in rounds; prints the ratio. Run by bench/quantized_export.sh.
//   quantized_speed FLOAT_DIR INT8_DIR [ROUNDS=3] [THREADS=1]
// Each DIR holds model.pt and the config.yaml the export wrote (its `data` node builds the data).
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lib/config/yaml_io.h"
#include "lib/data/datamodule.h"
#include "lib/data/sampler.h"
#include "lib/registry/registry.h"
#include "lib/weights/torchscript.h"

namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& what) {
  std::fprintf(stderr, "quantized_speed: %s\n", what.c_str());
  return 1;
}

struct Score {
  double value = 0;  // accuracy, or cross-entropy per token
  double seconds = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc < 3) return Fail("usage: quantized_speed FLOAT_DIR INT8_DIR [ROUNDS=3] [THREADS=1]");
  const std::string float_dir = argv[1], int8_dir = argv[2];
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  torch::set_num_threads(argc > 4 ? std::atoi(argv[4]) : 1);
  SelectQuantizedEngine();
  auto cfg_node = config::LoadYamlFile(float_dir + "/config.yaml");
  if (!cfg_node.ok()) return Fail(std::string(cfg_node.status().message()));
  config::Config cfg(*cfg_node);
  auto data_cfg = cfg.Sub("data");
  if (!data_cfg.ok()) return Fail(std::string(data_cfg.status().message()));
  auto dm = Registry<data::DataModule>::Get().Instantiate(*data_cfg);
  if (!dm.ok()) return Fail(std::string(dm.status().message()));
  if (auto st = (*dm)->Setup(data::Stage::kTest); !st.ok()) return Fail(std::string(st.message()));
  std::ifstream info_file(float_dir + "/model.json");
  if (!info_file) return Fail(float_dir + "/model.json: cannot read");
  nlohmann::json info = nlohmann::json::parse(info_file);
  std::vector<int64_t> shape = info["input"]["shape"].get<std::vector<int64_t>>();
  data::LoaderOptions lo = (*dm)->loader_options();
  lo.num_workers = 0;
  data::DataLoader loader((*dm)->test_dataset(),
                          data::SequentialSampler((*dm)->test_dataset()->size()), lo);
  std::vector<data::Batch> batches;
  auto loaded = loader.Run(0, 0, loader.num_batches(), [&](data::Batch& b) -> absl::StatusOr<bool> {
    // Token inputs to the traced length: padded with 0 at the end, or cut.
    if (b.input.scalar_type() == torch::kInt64 && b.input.dim() == 2 &&
        b.input.size(1) != shape[1]) {
      b.input = b.input.size(1) > shape[1]
                    ? b.input.narrow(1, 0, shape[1]).contiguous()
                    : torch::constant_pad_nd(b.input, {0, shape[1] - b.input.size(1)}, 0);
    }
    batches.push_back(b);
    return true;
  });
  if (!loaded.ok()) return Fail(std::string(loaded.message()));
  torch::jit::Module models[2] = {torch::jit::load(float_dir + "/model.pt"),
                                  torch::jit::load(int8_dir + "/model.pt")};
  torch::NoGradGuard no_grad;
  auto run = [&](torch::jit::Module& m) {
    Score s;
    double correct = 0, loss = 0, count = 0;
    auto t0 = Clock::now();
    for (const data::Batch& b : batches) {
      torch::Tensor out = m.forward({b.input}).toTensor();
      if (out.dim() == 3) {  // language model: logits [B, T, vocab], targets [B, T]
        // Per real token, as the task's test/loss: the <pad> (0) filling the split's last block is
        // no target.
        loss +=
            torch::nn::functional::cross_entropy(out.flatten(0, 1), b.target.flatten(),
                                                 torch::nn::functional::CrossEntropyFuncOptions()
                                                     .reduction(torch::kSum)
                                                     .ignore_index(0))
                .item<double>();
        count += b.target.ne(0).sum().item<double>();
      } else {
        correct += out.argmax(1).eq(b.target).sum().item<double>();
        count += static_cast<double>(b.target.size(0));
      }
    }
    s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    s.value = (loss > 0 ? loss : correct) / count;
    return s;
  };
  const bool lm = info["output"]["shape"].size() == 3;
  std::vector<double> times[2];
  Score last[2];
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < 2; ++i) {
      last[i] = run(models[i]);
      times[i].push_back(last[i].seconds);
    }
  }
  for (auto& t : times) std::sort(t.begin(), t.end());
  double f = times[0][times[0].size() / 2], q = times[1][times[1].size() / 2];
  const char* metric = lm ? "cross-entropy/token" : "accuracy";
  std::printf("%s: %zu test batches, %d rounds (median)\n", float_dir.c_str(), batches.size(),
              rounds);
  std::printf("float32      %s %.4f  %.3f s\n", metric, last[0].value, f);
  std::printf("dynamic_int8 %s %.4f  %.3f s\n", metric, last[1].value, q);
  std::printf("speed-up %.2fx, %s change %+.4f\n", f / q, metric, last[1].value - last[0].value);
  return 0;
}
