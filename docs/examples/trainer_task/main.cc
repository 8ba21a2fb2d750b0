// kiln's Trainer driving a Task written in plain C++ (the LightningModule analog): the task
// owns a small convolutional network defined right here, computes its loss and metrics, and
// the Trainer runs the loop (epochs, validation, logging) over a data module from the library.
//   trainer_task [FASHION_MNIST_DIR]
// Prints the test metrics; exits 1 when test accuracy is not above 70% (the CI checks it).
#include <kiln/data.h>
#include <kiln/registry.h>
#include <kiln/trainer.h>

#include <cstdio>
#include <string>

using kiln::Options;
using kiln::Registry;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).stride(2)));
    fc = register_module("fc", torch::nn::Linear(16 * 12 * 12, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc->forward(torch::relu(conv->forward(x)).flatten(1));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

class ClassifyTask : public kiln::Task {
 public:
  absl::Status Build(const kiln::config::Config&) override { return absl::OkStatus(); }
  torch::nn::Module& module() override { return *net_; }

  absl::StatusOr<torch::Tensor> TrainingStep(const kiln::data::Batch& batch,
                                             kiln::MetricLog& log) override {
    torch::Tensor logits = net_->forward(batch.input);
    torch::Tensor loss = torch::cross_entropy_loss(logits, batch.target);
    log.Log("train/loss", loss.item<double>(), batch.size());
    return loss;
  }

  absl::Status EvaluationStep(const kiln::data::Batch& batch, const std::string& stage,
                              kiln::MetricLog& log) override {
    torch::Tensor logits = net_->forward(batch.input);
    log.Log(stage + "/loss", torch::cross_entropy_loss(logits, batch.target).item<double>(),
            batch.size());
    log.Log(stage + "/acc",
            logits.argmax(1).eq(batch.target).to(torch::kDouble).mean().item<double>(),
            batch.size());
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> PredictStep(const kiln::data::Batch& batch) override {
    return torch::softmax(net_->forward(batch.input), 1);
  }

 private:
  Net net_;
};

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 2;
}

int main(int argc, char** argv) {
  std::string root = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  std::vector<Options> pipeline = {Options().Set("_target_", "to_tensor")};
  auto data = Registry<kiln::data::DataModule>::Get().Instantiate(
      "idx_images", Options()
                        .Set("root", root)
                        .Set("batch_size", 128)
                        .Set("transforms", Options().Set("train", pipeline).Set("eval", pipeline)));
  if (!data.ok()) return Fail(data.status());
  auto optimizer =
      Registry<kiln::OptimizerFactory>::Get().Instantiate("adamw", Options().Set("lr", 3e-3));
  if (!optimizer.ok()) return Fail(optimizer.status());

  // The same options `trainer:` takes in YAML, validated by the same declaration.
  auto options = kiln::TrainerOptions::FromConfig(Options()
                                                      .Set("max_epochs", 1)
                                                      .Set("limit_train_batches", 150)
                                                      .Set("limit_val_batches", 10)
                                                      .Set("num_threads", 2)
                                                      .Set("enable_progress_bar", false)
                                                      .config());
  if (!options.ok()) return Fail(options.status());

  ClassifyTask task;
  kiln::Trainer trainer(*options, /*callbacks=*/{}, /*loggers=*/{});
  kiln::FitInputs fit;
  fit.task = &task;
  fit.data = data->get();
  fit.optimizer = *optimizer;
  fit.model_name = "example_net";
  fit.seed = 0;
  if (auto st = trainer.Fit(fit); !st.ok()) return Fail(st);
  auto metrics = trainer.Evaluate(task, **data, kiln::data::Stage::kTest);
  if (!metrics.ok()) return Fail(metrics.status());
  for (const auto& [name, value] : *metrics) std::printf("%s: %.4f\n", name.c_str(), value);
  return metrics->at("test/acc") > 0.70 ? 0 : 1;
}
