// `instruction_text`: supervised fine-tuning data for the language_modeling task. Each record of a
// JSONL, CSV or TSV file holds a prompt and a response (configurable fields, as Alpaca's or
// torchtune's instruct datasets); an example is <s> prompt response </s> (the tokenizer's own
// start and end ids), and the targets at the prompt's positions are SpecialTokens::kIgnore, which
// the loss skips, so the loss is the mean cross-entropy of the response tokens (and the </s> that
// ends them) alone. A JSONL record may instead be a conversation rendered through a model's chat
// template (`python -m kiln.chat`, python/kiln/chat.py): its segments' tokens in order, as the
// template wrote them (with its own start and end tokens), the assistant's turns the targets.
// Examples keep their own lengths, cut to
// block_size tokens (the model's context; the response's end goes first), and are padded per
// batch; the held-out split's loss is the responses' loss.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/text/text_data_module.h"
#include "components/text/text_files.h"
#include "components/text/utf8.h"
#include "lib/base/status_macros.h"
#include "lib/data/padding.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::text {
namespace {

struct InstructionOptions : TextDataOptions {
  std::string train;
  std::optional<std::string> val, test;
  std::string format = "auto";
  std::string prompt_field = "prompt";
  std::string response_field = "response";
  std::string segments_field = "segments";
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  int64_t block_size = 512;
  bool packing = false;
};

// Examples in memory: input <s> prompt response (without the last token), target the next tokens
// with the prompt's masked.
class InstructionExamples : public data::Dataset {
 public:
  struct Item {
    std::vector<int64_t> input, target;
    std::vector<int64_t> segments;  // packed: each position's example in the row; else empty
    std::string where;
  };
  explicit InstructionExamples(std::vector<Item> items) : items_(std::move(items)) {}
  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng&) const override {
    const Item& item = items_.at(static_cast<size_t>(index));
    data::Example e;
    e.input = torch::tensor(item.input, torch::kInt64);
    e.target = torch::tensor(item.target, torch::kInt64);
    if (!item.segments.empty()) e.segments = torch::tensor(item.segments, torch::kInt64);
    return e;
  }
  std::string Source(int64_t index) const override {
    return items_.at(static_cast<size_t>(index)).where;
  }
  int64_t Length(int64_t index) const override {
    return static_cast<int64_t>(items_.at(static_cast<size_t>(index)).input.size());
  }

 private:
  std::vector<Item> items_;
};

class InstructionText : public TextDataModule {
 public:
  InstructionText(InstructionOptions o, std::shared_ptr<Tokenizer> tokenizer)
      : TextDataModule(std::move(tokenizer), o.loader()),
        o_(std::move(o)),
        fields_{o_.format, o_.prompt_field, o_.response_field, o_.segments_field} {}

  absl::Status Setup(data::Stage stage) override {
    KILN_ASSIGN_OR_RETURN(auto tok, tokenizer());
    // Inputs padded with the tokenizer's pad id (any id would do: padding comes after an
    // example's tokens and predicts nothing), targets with the ignored target.
    const int64_t pad = std::max<int64_t>(tok->special_ids().pad, 0);
    mutable_loader().collate = [pad](std::vector<data::Example>& examples) {
      return data::PadCollate(examples, pad, SpecialTokens::kIgnore);
    };
    if ((stage == data::Stage::kFit || stage == data::Stage::kValidate) && !train_) {
      KILN_RETURN_IF_ERROR(LoadTrain());
      if (o_.val.value_or("").empty()) {
        auto [t, v] = HoldOut(train_records_, o_.val_fraction, o_.split_seed);
        KILN_ASSIGN_OR_RETURN(train_, Encode(*tok, t, "train"));
        if (!v.empty()) {
          KILN_ASSIGN_OR_RETURN(val_, Encode(*tok, v, "val"));
        }
      } else {
        KILN_ASSIGN_OR_RETURN(train_, Encode(*tok, train_records_, "train"));
        KILN_ASSIGN_OR_RETURN(auto val, ReadLabelledTexts(*o_.val, fields_, true));
        KILN_ASSIGN_OR_RETURN(val_, Encode(*tok, val, "val"));
      }
    }
    if (stage == data::Stage::kTest && !test_ && !o_.test.value_or("").empty()) {
      KILN_ASSIGN_OR_RETURN(auto test, ReadLabelledTexts(*o_.test, fields_, true));
      KILN_ASSIGN_OR_RETURN(test_, Encode(*tok, test, "test"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const data::Dataset> test_dataset() const override { return test_; }
  int64_t block_size() const override { return o_.block_size; }
  // Response tokens (with </s>) per response character: bits per character of the responses.
  double tokens_per_char(const std::string& split) const override {
    auto it = response_chars_.find(split);
    if (it == response_chars_.end() || it->second == 0) return 0;
    return static_cast<double>(response_tokens_.at(split)) / static_cast<double>(it->second);
  }

 protected:
  absl::StatusOr<std::vector<std::string>> TrainingTexts() override {
    KILN_RETURN_IF_ERROR(LoadTrain());
    std::vector<std::string> texts;
    for (const auto& r : train_records_) {
      texts.push_back(r.text);
      texts.push_back(r.label);
      for (const auto& [text, trained] : r.segments) texts.push_back(text);
    }
    return texts;
  }
  std::string TrainingName() const override { return o_.train; }

 private:
  absl::Status LoadTrain() {
    if (train_records_.empty()) {
      KILN_ASSIGN_OR_RETURN(train_records_, ReadLabelledTexts(o_.train, fields_, true));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<InstructionExamples>> Encode(
      const Tokenizer& tok, const std::vector<TextRecord>& records, const std::string& split) {
    // Each record as texts in order, each with whether its tokens are targets: <s> prompt
    // response </s> (the response and the end trained), or a rendered conversation's segments as
    // they are (its chat template wrote the start and end tokens).
    std::vector<std::string> texts;
    std::vector<size_t> first_text;
    for (const auto& r : records) {
      first_text.push_back(texts.size());
      if (r.segments.empty()) {
        texts.push_back(r.text);
        texts.push_back(r.label);
      }
      for (const auto& [text, trained] : r.segments) texts.push_back(text);
    }
    const std::vector<std::vector<int64_t>> ids = tok.EncodeAll(texts);
    std::vector<InstructionExamples::Item> items;
    int64_t cut = 0, tokens = 0, chars = 0;
    // The tokenizer's own start and end of text (kiln's <s> and </s>; a pretrained model's), where
    // it has them.
    const SpecialIds special = tok.special_ids();
    for (size_t i = 0; i < records.size(); ++i) {
      const TextRecord& record = records[i];
      std::vector<int64_t> seq;
      std::vector<bool> trained;  // whether token k is learned (a target where predicted)
      auto add = [&](const std::vector<int64_t>& part, bool train) {
        seq.insert(seq.end(), part.begin(), part.end());
        trained.insert(trained.end(), part.size(), train);
      };
      const size_t first = first_text[i];
      if (record.segments.empty()) {
        if (special.bos >= 0) add({special.bos}, false);
        add(ids[first], false);
        add(ids[first + 1], true);
        if (special.eos >= 0) add({special.eos}, true);
        // The end token stands for the end of the response.
        chars += CountCodePoints(record.label) + (special.eos >= 0 ? 1 : 0);
      } else {
        for (size_t k = 0; k < record.segments.size(); ++k) {
          add(ids[first + k], record.segments[k].second);
          if (record.segments[k].second) chars += CountCodePoints(record.segments[k].first);
        }
      }
      if (static_cast<int64_t>(seq.size()) > o_.block_size + 1) {
        seq.resize(static_cast<size_t>(o_.block_size + 1));
        trained.resize(seq.size());
        ++cut;
      }
      InstructionExamples::Item item;
      item.input.assign(seq.begin(), seq.end() - std::min<size_t>(seq.size(), 1));
      item.target.assign(seq.begin() + std::min<size_t>(seq.size(), 1), seq.end());
      // Position t predicts token t+1: those that predict an untrained token count nothing. The
      // first token is predicted by none (with no start token, an empty prompt leaves the
      // response's first token unpredicted).
      int64_t learned = 0;
      for (size_t t = 0; t < item.target.size(); ++t) {
        if (trained[t + 1])
          ++learned;
        else
          item.target[t] = SpecialTokens::kIgnore;
      }
      if (learned == 0) {
        return absl::InvalidArgumentError(
            record.segments.empty()
                ? absl::StrCat(record.where, ": the prompt takes ", ids[first].size(),
                               " tokens, and data.block_size=", o_.block_size,
                               " leaves none of the response")
                : absl::StrCat(record.where, ": data.block_size=", o_.block_size,
                               " leaves none of the conversation's trained turns"));
      }
      tokens += learned;
      item.where = record.where;
      items.push_back(std::move(item));
    }
    if (cut > 0) {
      Logger::Instance().Warning(absl::StrCat(split, ": ", cut, " of ", records.size(),
                                              " examples cut to data.block_size=", o_.block_size,
                                              " tokens (their responses' ends)"));
    }
    response_tokens_[split] = tokens;
    response_chars_[split] = chars;
    if (o_.packing) items = Pack(std::move(items), split);
    return std::make_shared<InstructionExamples>(std::move(items));
  }

  // Examples one after another in rows of block_size tokens at most, in their order, each whole (a
  // row ends where the next example would not fit), as torchtune's PackedDataset packs them.
  std::vector<InstructionExamples::Item> Pack(std::vector<InstructionExamples::Item> items,
                                              const std::string& split) const {
    std::vector<InstructionExamples::Item> rows;
    int64_t tokens = 0;
    for (auto& item : items) {
      tokens += static_cast<int64_t>(item.input.size());
      if (rows.empty() ||
          static_cast<int64_t>(rows.back().input.size() + item.input.size()) > o_.block_size) {
        rows.emplace_back();
        rows.back().where = item.where;  // the row's first example
      }
      InstructionExamples::Item& row = rows.back();
      const int64_t segment = row.segments.empty() ? 0 : row.segments.back() + 1;
      row.input.insert(row.input.end(), item.input.begin(), item.input.end());
      row.target.insert(row.target.end(), item.target.begin(), item.target.end());
      row.segments.insert(row.segments.end(), item.input.size(), segment);
    }
    if (!rows.empty()) {
      Logger::Instance().Info(absl::StrFormat(
          "%s: %d examples packed into %d rows of data.block_size=%d tokens (%.1f%% filled)", split,
          items.size(), rows.size(), o_.block_size,
          100.0 * static_cast<double>(tokens) /
              static_cast<double>(static_cast<int64_t>(rows.size()) * o_.block_size)));
    }
    return rows;
  }

  InstructionOptions o_;
  RecordFields fields_;
  std::vector<TextRecord> train_records_;
  std::map<std::string, int64_t> response_tokens_, response_chars_;
  std::shared_ptr<InstructionExamples> train_, val_, test_;
};

KILN_REGISTER_BOUND(
    data::DataModule, "instruction_text",
    "Supervised fine-tuning data for language_modeling: prompt and response fields of JSONL/CSV/"
    "TSV records, or conversations rendered through a chat template; the loss counts the "
    "responses' tokens only",
    AddTextDataOptions(
        OptionBinding<InstructionOptions>()
            .Required("train", &InstructionOptions::train, "training file (.jsonl, .csv, .tsv)")
            .Field("val", &InstructionOptions::val, "validation file (null: val_fraction of train)")
            .Field("test", &InstructionOptions::test, "test file (null: no test split)")
            .Field("format", &InstructionOptions::format,
                   "auto (from the extension), jsonl, csv or tsv",
                   OneOf({"auto", "jsonl", "csv", "tsv"}))
            .Field("prompt_field", &InstructionOptions::prompt_field,
                   "the field holding the prompt (the instruction and its input)")
            .Field("response_field", &InstructionOptions::response_field,
                   "the field holding the response the model learns to give")
            .Field("segments_field", &InstructionOptions::segments_field,
                   "the JSONL field of a conversation rendered by python -m kiln.chat: [text, "
                   "trained] pairs, the assistant's turns trained (a record without it has a "
                   "prompt and a response)")
            .Field("val_fraction", &InstructionOptions::val_fraction,
                   "share of train held out for validation when val is null", InHalfOpenRange(0, 1))
            .Field("split_seed", &InstructionOptions::split_seed, "seed of that split")
            .Field("block_size", &InstructionOptions::block_size,
                   "tokens per example at most (<s>, prompt, response, </s>; the model's "
                   "context): longer ones lose their response's end",
                   AtLeast(1))
            .Field("packing", &InstructionOptions::packing,
                   "several examples in one row of block_size tokens, each attending to itself "
                   "alone (gpt, gpt2, llama); false: one example a row, padded per batch")),
    [](const InstructionOptions& o) -> absl::StatusOr<std::shared_ptr<data::DataModule>> {
      KILN_ASSIGN_OR_RETURN(auto tokenizer, Registry<Tokenizer>::Get().Instantiate(o.tokenizer));
      return std::make_shared<InstructionText>(o, std::move(tokenizer));
    });

}  // namespace
}  // namespace kiln::text
