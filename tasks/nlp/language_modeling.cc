// Language modeling: a registered model mapping token ids [B, T] to next-token logits [B, T, V];
// cross-entropy over the real (non-padding) targets. Training and evaluation log the loss and the
// metrics the config lists (configs/task/language_modeling.yaml: perplexity and bits per
// character, the summed token loss over the split's characters, comparable across tokenizers),
// in training for each batch and over the epoch. `kiln predict` generates text from a prompt
// (temperature, top-k, top-p, repetition penalty, stop strings, seed): with the key/value cache
// for the decoder models that have one (components/models/generation.h), else by running the
// whole context again for each token.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "components/models/generation.h"
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
  double top_p = 1.0;
  double repetition_penalty = 1.0;
  std::vector<std::string> stop;
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

  absl::StatusOr<std::map<std::string, std::string>> TokenizerFiles() const override {
    return binding_.HuggingFaceFiles();
  }
  bool splits_training_step() const override { return true; }
  absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& batch) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    auto [loss, losses] = Loss(logits, batch);
    return TrainingOutputs{loss, logits.detach(), losses};
  }

  absl::Status LogTrainingStep(const data::Batch& batch, const TrainingOutputs& outputs,
                               MetricLog& log) override {
    double tokens = Tokens(batch);
    if (tokens <= 0) return absl::OkStatus();
    log.Log("train/loss", outputs.loss.item<double>(), tokens);
    return metrics_.Update("train", Scores(outputs.preds, outputs.losses, batch, tokens, "train"),
                           log);
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(torch::Tensor logits, Logits(batch));
    double tokens = Tokens(batch);
    if (tokens <= 0) return absl::OkStatus();
    auto [loss, losses] = Loss(logits, batch);
    log.Log(stage + "/loss", loss.item<double>(), tokens);
    return metrics_.Update(stage, Scores(logits, losses, batch, tokens, stage), log);
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
    CompletionRequest request;
    request.prompts = {generation_.prompt};
    request.echo = true;
    KILN_ASSIGN_OR_RETURN(
        std::vector<Completion> done,
        CompleteWith(request, {},
                     "task.prompt is empty or has no tokens; give the text to continue: "
                     "task.prompt='Call me'"));
    return std::optional<std::string>(std::move(done.front().text));
  }

  absl::StatusOr<std::string> GenerateFrom(const std::string& prompt) override {
    CompletionRequest request;
    request.prompts = {prompt};
    request.echo = true;
    KILN_ASSIGN_OR_RETURN(std::vector<Completion> done, Complete(request, {}));
    return std::move(done.front().text);
  }

  absl::StatusOr<std::vector<Completion>> Complete(const CompletionRequest& request,
                                                   const CompletionSink& sink) override {
    return CompleteWith(request, sink,
                        "the prompt is empty or has no tokens; give the text to continue");
  }

 private:
  // The task's generation options under the request's own.
  absl::StatusOr<SamplingOptions> Sampling(const CompletionRequest& r,
                                           const text::Tokenizer& tok) const {
    SamplingOptions o;
    o.max_new_tokens = r.max_tokens.value_or(generation_.max_tokens);
    o.temperature = r.temperature.value_or(generation_.temperature);
    o.top_k = r.top_k.value_or(generation_.top_k);
    o.top_p = r.top_p.value_or(generation_.top_p);
    o.repetition_penalty = r.repetition_penalty.value_or(generation_.repetition_penalty);
    o.seed = static_cast<uint64_t>(r.seed.value_or(generation_.seed));
    if (o.max_new_tokens < 0) return absl::InvalidArgumentError("max_tokens must be at least 0");
    if (!(o.temperature >= 0)) return absl::InvalidArgumentError("temperature must be at least 0");
    if (o.top_k < 0) return absl::InvalidArgumentError("top_k must be at least 0 (0: all)");
    if (!(o.top_p > 0 && o.top_p <= 1))
      return absl::InvalidArgumentError("top_p must be in (0, 1]");
    if (!(o.repetition_penalty > 0))
      return absl::InvalidArgumentError("repetition_penalty must be greater than 0");
    // The tokenizer's own end of text (kiln's </s>, GPT-2's <|endoftext|>, ...); never padding or
    // the other specials, but </s> and <unk>.
    const text::SpecialIds special = tok.special_ids();
    if (special.eos >= 0) o.eos_token_ids = {special.eos};
    for (int64_t id : {special.pad, special.bos, special.cls}) {
      if (id >= 0 && id != special.eos && id != special.unk) o.never.push_back(id);
    }
    o.pad_token_id = std::max<int64_t>(special.pad, 0);
    o.context = context_;
    return o;
  }

  // The prompts continued together; each continuation cut before the first stop string.
  absl::StatusOr<std::vector<Completion>> CompleteWith(const CompletionRequest& request,
                                                       const CompletionSink& sink,
                                                       const char* empty_message) {
    KILN_RETURN_IF_ERROR(binding_.Check());
    const text::Tokenizer& tok = binding_.tokenizer();
    if (request.prompts.empty()) return absl::InvalidArgumentError("no prompt to continue");
    std::vector<std::vector<int64_t>> prompts;
    for (size_t i = 0; i < request.prompts.size(); ++i) {
      prompts.push_back(tok.Encode(request.prompts[i]));
      if (prompts.back().empty()) {
        return absl::InvalidArgumentError(request.prompts.size() > 1
                                              ? absl::StrCat("prompt[", i, "]: ", empty_message)
                                              : std::string(empty_message));
      }
    }
    KILN_ASSIGN_OR_RETURN(const SamplingOptions o, Sampling(request, tok));
    const std::vector<std::string>& stops = request.stop ? *request.stop : generation_.stop;
    torch::NoGradGuard no_grad;
    model_->eval();
    // The decoder models continue from their key/value cache; the others run again over the
    // context for each token.
    std::shared_ptr<CausalLm> lm = std::dynamic_pointer_cast<CausalLm>(model_);
    if (lm == nullptr) lm = std::make_shared<RecomputingLm>(model_);

    std::vector<size_t> sent(prompts.size(), 0);  // bytes of each continuation the sink has
    bool gone = false;
    // Hands the sink what `text` adds to what it has, up to `upto` bytes.
    auto send = [&](size_t row, const std::string& text, size_t upto) {
      if (!sink || gone || upto <= sent[row]) return;
      if (!sink(row, text.substr(sent[row], upto - sent[row]))) gone = true;
      sent[row] = upto;
    };
    StopCheck stop;
    if (!stops.empty() || sink) {
      stop = [&](size_t row, const std::vector<int64_t>& generated) {
        if (gone) return true;
        std::string text = tok.Decode(generated);
        const size_t at = FirstStop(text, stops);
        if (at != std::string::npos) text.resize(at);
        send(row, text, at != std::string::npos ? text.size() : SettledLength(text, stops));
        return gone || at != std::string::npos;
      };
    }
    std::vector<std::vector<int64_t>> generated = kiln::Generate(*lm, prompts, o, stop);
    if (gone) return absl::CancelledError("generation stopped: the client is gone");
    std::vector<Completion> out(prompts.size());
    int64_t tokens = 0;
    for (size_t row = 0; row < prompts.size(); ++row) {
      std::string text = tok.Decode(generated[row]);
      const size_t at = FirstStop(text, stops);
      if (at != std::string::npos) text.resize(at);
      send(row, text, text.size());
      Completion& c = out[row];
      c.prompt_tokens = static_cast<int64_t>(prompts[row].size());
      c.completion_tokens = static_cast<int64_t>(generated[row].size());
      c.finish_reason =
          at != std::string::npos || c.completion_tokens < o.max_new_tokens ? "stop" : "length";
      c.text = request.echo ? tok.Decode(prompts[row]) + text : std::move(text);
      tokens += c.completion_tokens;
    }
    if (gone) return absl::CancelledError("generation stopped: the client is gone");
    Logger::Instance().Info(absl::StrCat("generated ", tokens, " tokens after ", prompts.size(),
                                         prompts.size() == 1 ? " prompt" : " prompts"));
    return out;
  }

  // Where the first stop string begins in `text` (npos: none).
  static size_t FirstStop(const std::string& text, const std::vector<std::string>& stops) {
    size_t first = std::string::npos;
    for (const std::string& s : stops) {
      if (!s.empty()) first = std::min(first, text.find(s));
    }
    return first;
  }

  // How much of `text` can no longer change: not a tail that could still grow into a stop string,
  // nor an unfinished UTF-8 character (or the replacement character a byte-level decoder gives
  // for one).
  static size_t SettledLength(const std::string& text, const std::vector<std::string>& stops) {
    size_t n = text.size();
    for (const std::string& s : stops) {
      for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); k > 0; --k) {
        if (text.compare(text.size() - k, k, s, 0, k) == 0) {
          n = std::min(n, text.size() - k);
          break;
        }
      }
    }
    static const std::string kReplacement = "\xEF\xBF\xBD";
    while (n >= 3 && text.compare(n - 3, 3, kReplacement) == 0) n -= 3;
    // An unfinished UTF-8 sequence at the end: a lead byte with fewer continuation bytes than it
    // announces.
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
      const auto c = static_cast<unsigned char>(text[n - back]);
      if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) n -= back;
      break;
    }
    return n;
  }

  absl::StatusOr<torch::Tensor> Logits(const data::Batch& batch) {
    torch::Tensor logits;
    if (batch.segments.defined()) {
      // Packed rows: the model keeps each example's attention and positions to itself.
      auto* lm = dynamic_cast<CausalLm*>(model_.get());
      if (lm != nullptr) logits = lm->forward_packed(batch.input, batch.segments);
      if (!logits.defined()) {
        return absl::InvalidArgumentError(
            "data.packing=true needs a model that keeps packed examples apart (gpt, gpt2, llama); "
            "set data.packing=false for this one");
      }
    } else {
      logits = model_->forward(batch.input);
    }
    if (logits.dim() != 3 || logits.size(0) != batch.target.size(0) ||
        logits.size(1) != batch.target.size(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "language_modeling needs next-token logits [batch, tokens, vocab] from the model, got ",
          c10::str(logits.sizes()), " for targets ", c10::str(batch.target.sizes())));
    }
    return logits;
  }

  // The mean cross-entropy over the real (non-padding) targets, and the loss of each target
  // position (0 at padding; outside autograd) for the metrics. The mean is the positions' sum over
  // their count, whose gradient is the bits of cross_entropy's own mean reduction (-1 / count at
  // each target); its value can differ from that reduction's in the last bit (another order).
  static std::pair<torch::Tensor, torch::Tensor> Loss(const torch::Tensor& logits,
                                                      const data::Batch& batch) {
    torch::Tensor target = batch.target.reshape({-1});
    torch::Tensor each = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(2)}).to(torch::kFloat32), target,
        torch::nn::functional::CrossEntropyFuncOptions()
            .ignore_index(text::SpecialTokens::kIgnore)
            .reduction(torch::kNone));
    torch::Tensor counted = target.ne(text::SpecialTokens::kIgnore).sum();
    return {each.sum() / counted, each.detach().view(batch.target.sizes())};
  }

  // What the metrics see of a batch: the scores of its real targets, and for bits per character
  // how many characters its `tokens` stand for in the stage's split.
  MetricBatch Scores(const torch::Tensor& logits, const torch::Tensor& losses,
                     const data::Batch& batch, double tokens, const std::string& stage) const {
    MetricBatch scores;
    scores.preds = logits;
    scores.losses = losses;
    scores.target = batch.target;
    scores.mask = batch.target.ne(text::SpecialTokens::kIgnore);
    double per_char = binding_.data() ? binding_.data()->tokens_per_char(stage) : 0;
    if (per_char > 0) scores.characters = tokens / per_char;
    return scores;
  }

  static double Tokens(const data::Batch& batch) {
    return batch.target.ne(text::SpecialTokens::kIgnore).sum().item<double>();
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
        .Field("top_p", &GenerationOptions::top_p,
               "kiln predict: sample among the most likely tokens whose probabilities sum to p "
               "(nucleus sampling; 1: all)",
               InRange(0, 1))
        .Field("repetition_penalty", &GenerationOptions::repetition_penalty,
               "kiln predict: divide the scores of tokens already seen by it (negative ones "
               "multiplied; 1: none), as transformers does",
               GreaterThan(0))
        .Field("stop", &GenerationOptions::stop,
               "kiln predict: strings that end the text (cut before the first one)")
        .Field("seed", &GenerationOptions::seed, "kiln predict: seed of the sampling")
        .Node("metrics", &GenerationOptions::metrics, OptionType::kMap, kMetricsOptionDoc),
    [](const GenerationOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<LanguageModeling>(o, o.metrics);
    });

}  // namespace
}  // namespace kiln
