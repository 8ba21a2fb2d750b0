// Speech recognition with CTC: a SequenceModel maps padded features [B, frames, F] with their
// lengths to per-frame logits [B, frames', V] and output lengths; the CTC loss (blank = id 0, the
// tokenizer's <pad>, which no transcript contains) trains it against the transcript's token ids.
// Evaluation decodes every utterance (greedy or prefix beam search) and hands hypotheses and
// references to the metrics the config lists (configs/task/speech_recognition.yaml: the cer and
// wer metrics, edit distance over the reference's characters or words, summed over the split).
// A test run also writes every reference and hypothesis to test_transcripts.tsv;
// `kiln predict` transcribes audio files into predictions.csv (path,text).
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/metrics/edit_distance.h"
#include "components/models/model.h"
#include "components/text/text_files.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/task.h"
#include "tasks/nlp/tokenizer_binding.h"
#include "tasks/speech/ctc_decode.h"

namespace kiln {
namespace {

constexpr int64_t kBlank = text::SpecialTokens::kPad;

enum class Decoder { kGreedy, kBeam };

struct LmOptions {
  int64_t order = 0;             // 0: no LM
  double weight = 0, bonus = 0;  // read from the options, whose defaults are in the schema
  std::string text;              // more LM sentences, one per line ("": the transcripts only)
};

class SpeechRecognition : public Task {
 public:
  SpeechRecognition(Decoder decoder, int64_t beam_size, LmOptions lm, config::NodePtr metrics)
      : decoder_(decoder),
        beam_size_(beam_size),
        lm_options_(lm),
        metrics_node_(std::move(metrics)) {}

  absl::Status Build(const config::Config& job) override {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, binding_.BuildModel(job));
    model_ = std::dynamic_pointer_cast<SequenceModel>(model);
    if (!model_) {
      return absl::InvalidArgumentError(
          absl::StrCat("speech_recognition needs a sequence model that takes the frames' lengths "
                       "(conv_bilstm); model '",
                       binding_.model_name(), "' is not one"));
    }
    return metrics_.Build(metrics_node_, "task.metrics", MetricSetup{});
  }

  torch::nn::Module& module() override { return *model_; }
  std::function<torch::Tensor(const torch::Tensor&)> ModelForward() override {
    return [model = model_](const torch::Tensor& x) { return model->forward(x); };
  }

  absl::Status Connect(data::DataModule& data) override {
    metrics_.Connect(data);
    KILN_RETURN_IF_ERROR(binding_.Connect(data, "speech_recognition"));
    if (lm_options_.order > 0 && !lm_) {
      // The decoding LM, from the training transcripts (and lm_text's lines) in the tokenizer's
      // ids.
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, binding_.data()->training_texts());
      const size_t transcripts = texts.size();
      if (!lm_options_.text.empty()) {
        KILN_ASSIGN_OR_RETURN(std::vector<text::TextRecord> lines,
                              text::ReadTextLines(lm_options_.text));
        for (auto& line : lines) texts.push_back(std::move(line.text));
      }
      const text::Tokenizer& tok = binding_.tokenizer();
      lm_ = std::make_unique<speech::NgramLm>(static_cast<int>(lm_options_.order), tok.vocab_size(),
                                              text::SpecialTokens::kBos, text::SpecialTokens::kEos);
      for (const auto& ids : tok.EncodeAll(texts)) lm_->Add(ids);
      Logger::Instance().Info(absl::StrCat(
          "decoding LM: ", lm_options_.order, "-gram over token ids from ", transcripts,
          " training transcripts",
          lm_options_.text.empty()
              ? ""
              : absl::StrCat(" and ", texts.size() - transcripts, " lines of ", lm_options_.text),
          " (weight ", lm_options_.weight, ", bonus ", lm_options_.bonus, ")"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(Output out, Forward(batch));
    torch::Tensor loss = Loss(out, batch);
    log.Log("train/loss", loss.item<double>(), static_cast<double>(batch.size()));
    return loss;
  }

  absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                              MetricLog& log) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(Output out, Forward(batch));
    log.Log(stage + "/loss", Loss(out, batch).item<double>(), static_cast<double>(batch.size()));
    MetricBatch texts;
    texts.predicted_texts = Decode(out);
    torch::Tensor target = batch.target.to(torch::kCPU);
    for (int64_t i = 0; i < batch.size(); ++i) {
      torch::Tensor row = target[i];
      row = row.masked_select(row.ne(kBlank));
      std::vector<int64_t> ids(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      texts.target_texts.push_back(binding_.tokenizer().Decode(ids));
      if (stage == "test") {
        const std::string& reference = texts.target_texts.back();
        const std::string& hypothesis = texts.predicted_texts[static_cast<size_t>(i)];
        metrics::ErrorCount chars = metrics::CharacterErrors(hypothesis, reference);
        transcripts_ += absl::StrFormat("%s\t%s\t%d\t%d\n", reference, hypothesis, chars.errors,
                                        chars.reference);
      }
    }
    return metrics_.Update(stage, texts, log);
  }

  absl::StatusOr<std::map<std::string, double>> EvaluationEnd(
      const std::string& stage, const SumOverRanks& sum_over_ranks) override {
    return metrics_.Compute(stage, sum_over_ranks);
  }

  absl::StatusOr<std::map<std::string, double>> TestReport(
      const std::string& output_dir, const std::vector<std::string>& /*class_names*/) override {
    std::string file = output_dir + "/test_transcripts.tsv";
    KILN_RETURN_IF_ERROR(WriteFileAtomically(
        file, "reference\thypothesis\tchar_errors\treference_chars\n" + transcripts_));
    transcripts_.clear();
    return std::map<std::string, double>();
  }

  // The decoded token ids of each utterance, padded with -1: [B, longest].
  absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    KILN_ASSIGN_OR_RETURN(Output out, Forward(batch));
    std::vector<std::vector<int64_t>> decoded = DecodeIds(out);
    size_t longest = 1;
    for (const auto& d : decoded) longest = std::max(longest, d.size());
    std::vector<int64_t> flat(decoded.size() * longest, -1);
    for (size_t i = 0; i < decoded.size(); ++i)
      std::copy(decoded[i].begin(), decoded[i].end(),
                flat.begin() + static_cast<std::ptrdiff_t>(i * longest));
    return torch::tensor(flat, torch::kInt64).view({batch.size(), static_cast<int64_t>(longest)});
  }

  // Transcripts: {text} per utterance.
  absl::StatusOr<std::vector<PredictionRecord>> PredictionRecords(
      const torch::Tensor& output, const std::vector<std::string>& /*class_names*/) override {
    std::vector<PredictionRecord> records;
    for (int64_t i = 0; i < output.size(0); ++i) {
      torch::Tensor row = output[i];
      row = row.masked_select(row.ge(0)).contiguous();
      std::vector<int64_t> ids(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      PredictionRecord record;
      record.fields = {{"text", config::Node::String(binding_.tokenizer().Decode(ids))}};
      records.push_back(std::move(record));
    }
    return records;
  }

 private:
  struct Output {
    torch::Tensor log_probs;  // float [B, frames', V]
    torch::Tensor lengths;    // int64 [B] (CPU)
  };

  absl::StatusOr<Output> Forward(const data::Batch& batch) {
    if (batch.input.dim() != 3 || !batch.lengths.defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "speech_recognition expects padded features [batch, frames, features] with lengths, got ",
          c10::str(batch.input.sizes()), " (use an audio data module: audio_manifest)"));
    }
    auto [logits, lengths] = model_->forward_padded(batch.input, batch.lengths);
    if (logits.dim() != 3 || logits.size(0) != batch.size() || lengths.numel() != batch.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model outputs ", c10::str(logits.sizes()), " for a batch of ",
                       batch.size(), "; speech_recognition needs [batch, frames, classes]"));
    }
    if (logits.size(2) < binding_.tokenizer().vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("the model has ", logits.size(2),
                                                     " outputs per frame but the tokenizer ",
                                                     binding_.tokenizer().vocab_size(),
                                                     " ids; set model.num_classes: "
                                                     "${data.tokenizer.vocab_size}"));
    }
    return Output{torch::log_softmax(logits.to(torch::kFloat32), 2), lengths.to(torch::kCPU)};
  }

  // CTC loss per utterance divided by its transcript's length, averaged over the batch; an
  // utterance too short for its transcript contributes zero rather than infinity.
  torch::Tensor Loss(const Output& out, const data::Batch& batch) const {
    torch::Tensor target = batch.target.to(out.log_probs.device(), torch::kInt64);
    torch::Tensor target_lengths = target.ne(kBlank).sum(1).to(torch::kCPU);
    return torch::ctc_loss(out.log_probs.transpose(0, 1), target, out.lengths, target_lengths,
                           kBlank, at::Reduction::Mean, /*zero_infinity=*/true);
  }

  std::vector<std::vector<int64_t>> DecodeIds(const Output& out) const {
    torch::Tensor log_probs = out.log_probs.detach().to(torch::kCPU);
    std::vector<std::vector<int64_t>> decoded;
    const speech::LmFusion fusion{lm_.get(), lm_options_.weight, lm_options_.bonus};
    for (int64_t i = 0; i < log_probs.size(0); ++i) {
      torch::Tensor frames = log_probs[i].narrow(0, 0, out.lengths[i].item<int64_t>());
      decoded.push_back(decoder_ == Decoder::kBeam
                            ? speech::CtcBeamSearch(frames, kBlank, beam_size_, fusion)
                            : speech::CtcGreedyDecode(frames, kBlank));
    }
    return decoded;
  }

  std::vector<std::string> Decode(const Output& out) const {
    std::vector<std::string> texts;
    for (const auto& ids : DecodeIds(out)) texts.push_back(binding_.tokenizer().Decode(ids));
    return texts;
  }

  Decoder decoder_;
  int64_t beam_size_;
  LmOptions lm_options_;
  std::unique_ptr<speech::NgramLm> lm_;  // when lm_order > 0
  std::string transcripts_;              // test_transcripts.tsv rows
  config::NodePtr metrics_node_;
  MetricCollection metrics_;
  TokenizerBinding binding_;
  std::shared_ptr<SequenceModel> model_;
};

struct SpeechRecognitionOptions {
  Decoder decoder = Decoder::kBeam;
  int64_t beam_size = 8;
  int64_t lm_order = 0;
  double lm_weight = 0.5;
  double lm_bonus = 1.0;
  std::string lm_text;
  config::NodePtr metrics;
};
using SR = SpeechRecognitionOptions;

KILN_REGISTER_BOUND(
    Task, "speech_recognition",
    "CTC speech recognition: CTC loss, greedy or beam-search decoding, metrics as configured "
    "(CER, WER); `kiln predict` transcribes audio",
    OptionBinding<SR>()
        .Enum("decoder", &SR::decoder, {{"greedy", Decoder::kGreedy}, {"beam", Decoder::kBeam}},
              "greedy (best class per frame) or beam (prefix beam search)")
        .Field("beam_size", &SR::beam_size, "prefixes the beam search keeps", AtLeast(1))
        .Field("lm_order", &SR::lm_order,
               "beam search with an n-gram LM of this order over the tokenizer's ids, trained from "
               "the training transcripts when the task connects (0: no LM)",
               InRange(0, 20))
        .Field("lm_weight", &SR::lm_weight, "the LM's weight in shallow fusion", AtLeast(0))
        .Field("lm_bonus", &SR::lm_bonus,
               "score added per emitted token (offsets the LM's short bias)")
        .Field("lm_text", &SR::lm_text,
               "a text file whose lines (one sentence each, normalized like the transcripts) "
               "train the LM too, besides the training transcripts (\"\": transcripts only)")
        .Node("metrics", &SR::metrics, OptionType::kMap, kMetricsOptionDoc),
    [](const SR& o, const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Task>> {
      if (!o.lm_text.empty() && o.lm_order == 0) {
        return context.Refuse(
            "lm_text", "empty without an LM (set " + context.FullKey("lm_order") + " above 0)");
      }
      if (o.lm_order > 0 && o.decoder != Decoder::kBeam) {
        return context.Refuse("lm_order",
                              "0 with decoder: greedy (the LM is fused into the beam search)");
      }
      return std::make_shared<SpeechRecognition>(
          o.decoder, o.beam_size, LmOptions{o.lm_order, o.lm_weight, o.lm_bonus, o.lm_text},
          o.metrics);
    });

}  // namespace
}  // namespace kiln
