// kiln's components in plain C++ — no YAML, no Trainer: a data module, a model and an
// optimizer built by name with options written in code, then a hand-written training loop.
//   plain_loop [FASHION_MNIST_DIR] [STEPS]
// Prints the test accuracy; exits 1 when it is not above 70% (the CI checks it).
#include <kiln/data.h>
#include <kiln/models.h>
#include <kiln/registry.h>
#include <kiln/trainer.h>

#include <cstdio>
#include <cstdlib>
#include <string>

using kiln::Options;
using kiln::Registry;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 2;
}

int main(int argc, char** argv) {
  std::string root = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int64_t steps = argc > 2 ? std::atoll(argv[2]) : 300;
  torch::set_num_threads(2);
  torch::manual_seed(0);

  Options normalize = Options()
                          .Set("_target_", "normalize")
                          .Set("mean", std::vector<double>{0.286})
                          .Set("std", std::vector<double>{0.353});
  std::vector<Options> pipeline = {Options().Set("_target_", "to_tensor"), normalize};
  auto data = Registry<kiln::data::DataModule>::Get().Instantiate(
      "idx_images", Options()
                        .Set("root", root)
                        .Set("batch_size", 64)
                        .Set("num_workers", 2)
                        .Set("transforms", Options().Set("train", pipeline).Set("eval", pipeline)));
  if (!data.ok()) return Fail(data.status());
  if (auto st = (*data)->Setup(kiln::data::Stage::kFit); !st.ok()) return Fail(st);
  if (auto st = (*data)->Setup(kiln::data::Stage::kTest); !st.ok()) return Fail(st);

  auto model = Registry<kiln::Model>::Get().Instantiate(
      "mlp", Options().Set("in_features", 784).Set("hidden", {128}).Set("num_classes", 10));
  if (!model.ok()) return Fail(model.status());
  auto factory =
      Registry<kiln::OptimizerFactory>::Get().Instantiate("adamw", Options().Set("lr", 2e-3));
  if (!factory.ok()) return Fail(factory.status());
  kiln::NamedParameters params;
  for (const auto& item : (*model)->named_parameters())
    params.emplace_back(item.key(), item.value());
  auto optimizer = (*factory)->Create(params);
  if (!optimizer.ok()) return Fail(optimizer.status());

  kiln::data::LoaderOptions loader_options = (*data)->loader_options();
  auto train_set = (*data)->train_dataset();
  kiln::data::DataLoader train(train_set, kiln::data::RandomSampler(train_set->size(), 7),
                               loader_options);
  int64_t step = 0;
  for (int64_t epoch = 0; step < steps; ++epoch) {
    auto status = train.Run(
        epoch, 0, train.num_batches(), [&](kiln::data::Batch& batch) -> absl::StatusOr<bool> {
          (*optimizer)->zero_grad();
          torch::Tensor loss =
              torch::cross_entropy_loss((*model)->forward(batch.input), batch.target);
          loss.backward();
          (*optimizer)->step();
          if (++step % 100 == 0)
            std::printf("step %lld: loss %.4f\n", static_cast<long long>(step),
                        loss.item<double>());
          return step < steps;
        });
    if (!status.ok()) return Fail(status);
  }

  torch::NoGradGuard no_grad;
  (*model)->eval();
  auto test_set = (*data)->test_dataset();
  kiln::data::DataLoader test(test_set, kiln::data::SequentialSampler(test_set->size()),
                              loader_options);
  int64_t correct = 0, seen = 0;
  auto status =
      test.Run(0, 0, test.num_batches(), [&](kiln::data::Batch& batch) -> absl::StatusOr<bool> {
        correct += (*model)->forward(batch.input).argmax(1).eq(batch.target).sum().item<int64_t>();
        seen += batch.size();
        return true;
      });
  if (!status.ok()) return Fail(status);
  double accuracy = static_cast<double>(correct) / static_cast<double>(seen);
  std::printf("test accuracy after %lld steps: %.4f (%lld images)\n", static_cast<long long>(steps),
              accuracy, static_cast<long long>(seen));
  return accuracy > 0.70 ? 0 : 1;
}
