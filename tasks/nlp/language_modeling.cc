// Language modeling: a registered model mapping token ids [B, T] to next-token logits [B, T, V];
// cross-entropy over the real (non-padding) targets. Training and evaluation log the loss and the
// metrics the config lists (configs/task/language_modeling.yaml: perplexity and bits per
// character, the summed token loss over the split's characters, comparable across tokenizers),
// in training for each batch and over the epoch. `kiln predict` generates text
// from a prompt (temperature, top-k, seed).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/task.h"
#include "tasks/nlp/tokenizer_binding.h"

namespace kiln {
namespace {

struct GenerationOptions {
  std::string prompt;
  int64_t max_tokens = 200;
  double temperature = 1.0;
  int64_t top_k = 0;
  int64_t seed = 0;
  config::NodePtr metrics;  // task.metrics (null: the defaults)
};

class LanguageModeling : public Task {
 public:
  LanguageModeling(GenerationOptions generation, config::NodePtr metrics)
      : generation_(std::move(generation)), metrics_node_(std::move(metrics)) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(model_, binding_.BuildModel(job));
    return metrics_.Build(metrics_node_, "task.metrics", MetricSetup{});
  }

  torch::nn::Module& module() override { return *model_; }
  std::function<torch::Tensor(const torch::Tensor&)> ModelForward() override {
    return [model = model_](const torch::Tensor& x) { return model->forward(x); };
  }

  absl::Status Connect(data::DataModule& data) override {
    metrics_.Connect(data);
    KILN_RETURN_IF_ERROR(binding_.Connect(data, "language_modeling"));
    // The context generation keeps: the model's positions, else the training block size.
    context_ = model_->max_positions();
    if (context_ <= 0) context_ = binding_.data()->block_size();
    if (context_ <= 0) context_ = 256;
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    KILN_ASSIGN_OR_RETURN(TrainingOutputs outputs, TrainingLoss(batch));
    KILN_RETURN_IF_ERROR(LogTrainingStep(batch, outputs, log));
    return outputs.loss;
  }

  bool splits_training_step() const override { return true; }
  absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& batch) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    torch::Tensor loss = Loss(logits, batch);
    return TrainingOutputs{loss, logits.detach()};
  }

  absl::Status LogTrainingStep(const data::Batch& batch, const TrainingOutputs& outputs,
                               MetricLog& log) override {
    double tokens = Tokens(batch);
    if (tokens <= 0) return absl::OkStatus();
    log.Log("train/loss", outputs.loss.item<double>(), tokens);
    return metrics_.Update("train", Scores(outputs.preds, batch, tokens, "train"), log);
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    double tokens = Tokens(batch);
    if (tokens <= 0) return absl::OkStatus();
    log.Log(stage + "/loss", Loss(logits, batch).item<double>(), tokens);
    return metrics_.Update(stage, Scores(logits, batch, tokens, stage), log);
  }

  absl::StatusOr<std::map<std::string, double>> TrainingEpochEnd(
      const SumOverRanks& sum_over_ranks) override {
    return metrics_.Compute("train", sum_over_ranks);
  }

  absl::StatusOr<std::map<std::string, double>> EvaluationEnd(
      const std::string& stage, const SumOverRanks& sum_over_ranks) override {
    return metrics_.Compute(stage, sum_over_ranks);
  }

  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    return torch::softmax(model_->forward(batch.input).to(torch::kFloat32), -1);
  }

  absl::StatusOr<std::optional<std::string>> Generate() override {
    return Continue(
        generation_.prompt,
        "task.prompt is empty or has no tokens; give the text to continue: task.prompt='Call me'");
  }

  absl::StatusOr<std::string> GenerateFrom(const std::string& prompt) override {
    KILN_ASSIGN_OR_RETURN(
        std::optional<std::string> text,
        Continue(prompt, "the prompt is empty or has no tokens; give the text to continue"));
    return *text;
  }

 private:
  // The prompt and what the model samples after it (temperature, top_k, seed, max_tokens).
  absl::StatusOr<std::optional<std::string>> Continue(const std::string& prompt,
                                                      const char* empty_message) {
    KILN_RETURN_IF_ERROR(binding_.Check());
    const text::Tokenizer& tok = binding_.tokenizer();
    std::vector<int64_t> ids = tok.Encode(prompt);
    if (ids.empty()) return absl::InvalidArgumentError(empty_message);
    torch::NoGradGuard no_grad;
    model_->eval();
    at::Generator generator =
        at::detail::createCPUGenerator(static_cast<uint64_t>(generation_.seed));
    const size_t prompt_tokens = ids.size();
    for (int64_t i = 0; i < generation_.max_tokens; ++i) {
      size_t start = ids.size() > static_cast<size_t>(context_)
                         ? ids.size() - static_cast<size_t>(context_)
                         : 0;
      torch::Tensor context =
          torch::tensor(
              std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.end()),
              torch::kInt64)
              .unsqueeze(0);
      torch::Tensor logits = model_->forward(context).select(1, -1).squeeze(0).to(torch::kFloat32);
      // Never sample padding or the other specials but </s> and <unk>.
      logits.index_fill_(0,
                         torch::tensor({text::SpecialTokens::kPad, text::SpecialTokens::kBos,
                                        text::SpecialTokens::kCls}),
                         -std::numeric_limits<float>::infinity());
      int64_t next;
      if (generation_.temperature <= 0) {
        next = logits.argmax().item<int64_t>();
      } else {
        logits = logits / generation_.temperature;
        if (generation_.top_k > 0 && generation_.top_k < logits.size(0)) {
          double kth = std::get<0>(logits.topk(generation_.top_k)).min().item<double>();
          logits.masked_fill_(logits < kth, -std::numeric_limits<float>::infinity());
        }
        next = torch::multinomial(torch::softmax(logits, 0), 1, false, generator).item<int64_t>();
      }
      if (next == text::SpecialTokens::kEos) break;
      ids.push_back(next);
    }
    Logger::Instance().Info(absl::StrCat("generated ", ids.size() - prompt_tokens,
                                         " tokens after a prompt of ", prompt_tokens));
    return std::optional<std::string>(tok.Decode(ids));
  }

  absl::StatusOr<torch::Tensor> Logits(const data::Batch& batch) {
    torch::Tensor logits = model_->forward(batch.input);
    if (logits.dim() != 3 || logits.size(0) != batch.target.size(0) ||
        logits.size(1) != batch.target.size(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "language_modeling needs next-token logits [batch, tokens, vocab] from the model, got ",
          c10::str(logits.sizes()), " for targets ", c10::str(batch.target.sizes())));
    }
    return logits;
  }

  // Cross-entropy over the real (non-padding) targets.
  static torch::Tensor Loss(const torch::Tensor& logits, const data::Batch& batch) {
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(2)}).to(torch::kFloat32), batch.target.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(text::SpecialTokens::kPad));
  }

  // What the metrics see of a batch: the scores of its real targets, and for bits per character
  // how many characters its `tokens` stand for in the stage's split.
  MetricBatch Scores(const torch::Tensor& logits, const data::Batch& batch, double tokens,
                     const std::string& stage) const {
    MetricBatch scores;
    scores.preds = logits;
    scores.target = batch.target;
    scores.mask = batch.target.ne(text::SpecialTokens::kPad);
    double per_char = binding_.data() ? binding_.data()->tokens_per_char(stage) : 0;
    if (per_char > 0) scores.characters = tokens / per_char;
    return scores;
  }

  static double Tokens(const data::Batch& batch) {
    return batch.target.ne(text::SpecialTokens::kPad).sum().item<double>();
  }

  GenerationOptions generation_;
  config::NodePtr metrics_node_;
  MetricCollection metrics_;
  int64_t context_ = 256;
  TokenizerBinding binding_;
  std::shared_ptr<Model> model_;
};

KILN_REGISTER_BOUND(
    Task, "language_modeling",
    "Next-token prediction: loss and metrics as configured (perplexity, bits per character); "
    "`kiln predict` generates from a prompt",
    OptionBinding<GenerationOptions>()
        .Field("prompt", &GenerationOptions::prompt, "kiln predict: the text to continue")
        .Field("max_tokens", &GenerationOptions::max_tokens,
               "kiln predict: tokens to generate at most (stops early at </s>)", AtLeast(0))
        .Field("temperature", &GenerationOptions::temperature,
               "kiln predict: sampling temperature (0: always the most likely token)", AtLeast(0))
        .Field("top_k", &GenerationOptions::top_k,
               "kiln predict: sample among the k most likely tokens (0: all)", AtLeast(0))
        .Field("seed", &GenerationOptions::seed, "kiln predict: seed of the sampling")
        .Node("metrics", &GenerationOptions::metrics, OptionType::kMap, kMetricsOptionDoc),
    [](const GenerationOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<LanguageModeling>(o, o.metrics);
    });

}  // namespace
}  // namespace kiln
