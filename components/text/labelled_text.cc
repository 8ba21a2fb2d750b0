// `labelled_text`: text classification data from JSONL, CSV or TSV files (configurable text and
// label fields) or a folder per class. Texts are tokenized in parallel, cut to max_length, padded
// per batch (lengths and masks), and bucketed by length when fitting.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/text/text_data_module.h"
#include "components/text/text_files.h"
#include "components/text/utf8.h"
#include "lib/base/status_macros.h"
#include "lib/data/padding.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::text {
namespace {

struct LabelledTextOptions : TextDataOptions {
  std::string train;
  std::optional<std::string> val, test, predict;
  std::string format = "auto";  // auto (from the extension or a folder), jsonl, csv, tsv, folder
  std::string text_field = "text";
  std::string label_field = "label";
  std::optional<std::vector<std::string>> labels;  // null: the sorted labels of train
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  int64_t max_length = 512;
  std::string truncation_side = "right";  // left keeps a long text's last tokens
  bool add_cls = false;
  bool bucket_by_length = true;
  int64_t bucket_window = 50;
};

// Tokenized texts with class indices (-1 when unlabelled) in memory.
class TokenizedTexts : public data::Dataset {
 public:
  TokenizedTexts(std::vector<std::vector<int64_t>> tokens, std::vector<int64_t> labels,
                 std::vector<std::string> sources, std::vector<std::string> texts,
                 std::vector<std::string> label_names, std::string label_ext)
      : tokens_(std::move(tokens)),
        labels_(std::move(labels)),
        sources_(std::move(sources)),
        texts_(std::move(texts)),
        label_names_(std::move(label_names)),
        label_ext_(std::move(label_ext)) {}
  // The text and its label's name (KEY.txt, KEY.LABEL_FIELD), what ReadLabelledTexts reads back.
  absl::StatusOr<data::EncodedSample> Encoded(int64_t index) const override {
    auto i = static_cast<size_t>(index);
    data::EncodedSample files{{"txt", texts_.at(i)}};
    if (labels_[i] >= 0)
      files.emplace_back(label_ext_, label_names_.at(static_cast<size_t>(labels_[i])));
    return files;
  }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng&) const override {
    const auto& t = tokens_.at(static_cast<size_t>(index));
    data::Example e;
    e.input = torch::from_blob(const_cast<int64_t*>(t.data()), {static_cast<int64_t>(t.size())},
                               torch::kInt64)
                  .clone();
    e.target = torch::tensor(labels_[static_cast<size_t>(index)], torch::kInt64);
    return e;
  }
  std::string Source(int64_t index) const override {
    return sources_.at(static_cast<size_t>(index));
  }
  int64_t Length(int64_t index) const override {
    return static_cast<int64_t>(tokens_.at(static_cast<size_t>(index)).size());
  }

 private:
  std::vector<std::vector<int64_t>> tokens_;
  std::vector<int64_t> labels_;
  std::vector<std::string> sources_, texts_, label_names_;
  std::string label_ext_;
};

// A text for predictions.csv: its first line, at most 80 characters.
std::string Preview(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > 80) {
    size_t cut = 80;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
    line = line.substr(0, cut) + "...";
  }
  return line;
}

class LabelledText : public TextDataModule {
 public:
  LabelledText(LabelledTextOptions o, std::shared_ptr<Tokenizer> tokenizer)
      : TextDataModule(std::move(tokenizer), o.loader()),
        o_(std::move(o)),
        fields_{o_.format, o_.text_field, o_.label_field} {}

  absl::Status Setup(data::Stage stage) override {
    KILN_ASSIGN_OR_RETURN(auto tok, tokenizer());
    data::LoaderOptions& lo = mutable_loader();
    SetPadCollate(*tok);
    // Bucketing groups similar lengths into batches; predictions keep the input order.
    lo.batch_order = nullptr;
    if (o_.bucket_by_length && stage == data::Stage::kFit) {
      lo.batch_order = data::LengthBucketing(lo.batch_size, o_.bucket_window,
                                             static_cast<uint64_t>(o_.split_seed));
    }
    if (stage == data::Stage::kFit || stage == data::Stage::kValidate) {
      if (!train_) {
        KILN_RETURN_IF_ERROR(LoadTrain());
        const std::vector<TextRecord>& train = train_records_;
        if (o_.val.value_or("").empty()) {
          auto [t, v] = HoldOut(train, o_.val_fraction, o_.split_seed);
          KILN_ASSIGN_OR_RETURN(train_, Encode(*tok, t, true));
          if (!v.empty()) {
            KILN_ASSIGN_OR_RETURN(val_, Encode(*tok, v, true));
          }
        } else {
          KILN_ASSIGN_OR_RETURN(train_, Encode(*tok, train, true));
          KILN_ASSIGN_OR_RETURN(auto val, ReadLabelledTexts(*o_.val, fields_, true));
          KILN_ASSIGN_OR_RETURN(val_, Encode(*tok, val, true));
        }
      }
    }
    if (stage == data::Stage::kTest && !test_ && !o_.test.value_or("").empty()) {
      KILN_ASSIGN_OR_RETURN(auto test, ReadLabelledTexts(*o_.test, fields_, true));
      KILN_ASSIGN_OR_RETURN(test_, Encode(*tok, test, true));
    }
    if (stage == data::Stage::kPredict && !predict_) {
      std::vector<TextRecord> records;
      if (!o_.predict.value_or("").empty()) {
        KILN_ASSIGN_OR_RETURN(records, ReadTextLines(*o_.predict));
      } else if (!o_.test.value_or("").empty()) {
        KILN_ASSIGN_OR_RETURN(records, ReadLabelledTexts(*o_.test, fields_, false));
      } else {
        return absl::FailedPreconditionError(
            "nothing to predict: set data.predict=FILE (one text per line, - for stdin)");
      }
      KILN_ASSIGN_OR_RETURN(predict_, Encode(*tok, records, false));
    }
    return absl::OkStatus();
  }

  // A raw input is a UTF-8 text, tokenized and cut to max_length as the splits are.
  absl::Status PrepareRawInputs() override {
    KILN_ASSIGN_OR_RETURN(raw_tokenizer_, tokenizer());
    SetPadCollate(*raw_tokenizer_);
    return absl::OkStatus();
  }
  absl::StatusOr<data::Example> RawExample(std::string_view raw) const override {
    if (raw_tokenizer_ == nullptr)
      return absl::FailedPreconditionError("PrepareRawInputs was not called");
    if (size_t bad = FindInvalidUtf8(raw); bad != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("the text is not valid UTF-8 (byte ", bad, ")"));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> tokens,
                          Framed(*raw_tokenizer_, raw_tokenizer_->Encode(raw)));
    data::Example e;
    e.input = torch::tensor(tokens, torch::kInt64);
    e.target = torch::tensor(int64_t{-1});
    return e;
  }

  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const data::Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const data::Dataset> predict_dataset() const override { return predict_; }
  std::vector<std::string> class_names() const override { return labels_; }

 protected:
  absl::StatusOr<std::vector<std::string>> TrainingTexts() override {
    KILN_RETURN_IF_ERROR(LoadTrain());
    std::vector<std::string> texts;
    texts.reserve(train_records_.size());
    for (const auto& r : train_records_) texts.push_back(r.text);
    return texts;
  }
  std::string TrainingName() const override { return o_.train; }

 private:
  // The training records (read once) and, from them, the label set.
  absl::Status LoadTrain() {
    if (train_records_.empty()) {
      KILN_ASSIGN_OR_RETURN(train_records_, ReadLabelledTexts(o_.train, fields_, true));
      if (!o_.labels || o_.labels->empty()) {
        std::set<std::string> seen;
        for (const auto& r : train_records_) seen.insert(r.label);
        labels_.assign(seen.begin(), seen.end());
        if (labels_.size() < 2) {
          return absl::InvalidArgumentError(
              absl::StrCat(o_.train, ": every text has the label '", *seen.begin(),
                           "'; classification needs at least 2 labels"));
        }
      } else {
        labels_ = *o_.labels;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<TokenizedTexts>> Encode(const Tokenizer& tok,
                                                         const std::vector<TextRecord>& records,
                                                         bool labelled) {
    std::map<std::string, int64_t> index;
    for (size_t i = 0; i < labels_.size(); ++i) index[labels_[i]] = static_cast<int64_t>(i);
    std::vector<int64_t> labels;
    std::vector<std::string> texts, sources;
    for (const auto& r : records) {
      int64_t label = -1;
      if (labelled || !r.label.empty()) {
        auto it = index.find(r.label);
        if (it == index.end() && labelled) {
          return absl::InvalidArgumentError(
              absl::StrCat(r.where, ": label '", r.label, "' is not one of the labels [",
                           absl::StrJoin(labels_, ", "), "]",
                           (!o_.labels || o_.labels->empty()) ? " (those of the training split)"
                                                              : " (data.labels)"));
        }
        if (it != index.end()) label = it->second;
      }
      labels.push_back(label);
      texts.push_back(r.text);
      sources.push_back(o_.predict.value_or("").empty() ? r.where : Preview(r.text));
    }
    std::vector<std::vector<int64_t>> tokens = tok.EncodeAll(texts);
    for (auto& t : tokens) {
      KILN_ASSIGN_OR_RETURN(t, Framed(tok, std::move(t)));
    }
    return std::make_shared<TokenizedTexts>(std::move(tokens), std::move(labels),
                                            std::move(sources), std::move(texts), labels_,
                                            o_.label_field);
  }

  // A text's tokens cut to max_length (on truncation_side) and framed with the tokenizer's ids:
  // its cls first (add_cls, or a model that pools it), its sep last where the model wants one.
  // A tokenizer without them (kiln's have no sep) frames with its bos and eos instead.
  absl::StatusOr<std::vector<int64_t>> Framed(const Tokenizer& tok, std::vector<int64_t> t) const {
    const SpecialIds special = tok.special_ids();
    const bool cls = o_.add_cls || frame_cls(), sep = frame_sep();
    const int64_t cls_id = special.cls >= 0 ? special.cls : special.bos;
    const int64_t sep_id = special.sep >= 0 ? special.sep : special.eos;
    if ((cls && cls_id < 0) || (sep && sep_id < 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "each text is framed with the tokenizer's cls (data.add_cls, or the model) and sep (the "
          "model), but the tokenizer (",
          tok.Describe(), ") has no ",
          cls && cls_id < 0 ? "cls_token (nor bos_token)" : "sep_token (nor eos_token)",
          "; use the model's own tokenizer (tokenizer=pretrained tokenizer.path=DIR)"));
    }
    int64_t budget = o_.max_length - (cls ? 1 : 0) - (sep ? 1 : 0);
    if (budget > 0 && static_cast<int64_t>(t.size()) > budget) {
      if (o_.truncation_side == "left")
        t.erase(t.begin(), t.end() - budget);
      else
        t.resize(static_cast<size_t>(budget));
    }
    if (cls) t.insert(t.begin(), cls_id);
    if (sep) t.push_back(sep_id);
    // An all-whitespace text still has one position.
    if (t.empty()) t.push_back(special.unk >= 0 ? special.unk : SpecialTokens::kUnk);
    return t;
  }

  // Rows padded with the tokenizer's pad id (kiln's 0; a pretrained tokenizer's own).
  void SetPadCollate(const Tokenizer& tok) {
    const int64_t pad = tok.special_ids().pad >= 0 ? tok.special_ids().pad : SpecialTokens::kPad;
    mutable_loader().collate = [pad](std::vector<data::Example>& examples) {
      return data::PadCollate(examples, pad);
    };
  }

  LabelledTextOptions o_;
  RecordFields fields_;
  std::shared_ptr<const Tokenizer> raw_tokenizer_;  // after PrepareRawInputs
  std::vector<TextRecord> train_records_;
  std::vector<std::string> labels_;
  std::shared_ptr<TokenizedTexts> train_, val_, test_, predict_;
};

KILN_REGISTER_BOUND(
    data::DataModule, "labelled_text",
    "Text classification data: JSONL/CSV/TSV with text and label fields, or a folder per class",
    AddTextDataOptions(
        OptionBinding<LabelledTextOptions>()
            .Required("train", &LabelledTextOptions::train,
                      "training file (.jsonl, .csv, .tsv) or folder per class")
            .Field("val", &LabelledTextOptions::val,
                   "validation file (null: val_fraction of train)")
            .Field("test", &LabelledTextOptions::test, "test file (null: no test split)")
            .Field("predict", &LabelledTextOptions::predict,
                   "texts to classify, one per line (- for stdin; null: the test file)")
            .Field("format", &LabelledTextOptions::format,
                   "auto (from the extension; .tar, .index.json, {..} ranges and pipe: are "
                   "shards), jsonl, csv, "
                   "tsv, folder or shards (KEY.txt + KEY.label, as kiln shard writes them)",
                   OneOf({"auto", "jsonl", "csv", "tsv", "folder", "shards"}))
            .Field("text_field", &LabelledTextOptions::text_field,
                   "the field (JSON key or CSV column) holding the text")
            .Field("label_field", &LabelledTextOptions::label_field, "the field holding the label")
            .Field("labels", &LabelledTextOptions::labels,
                   "the label set in class order (null: the sorted labels of train)")
            .Field("val_fraction", &LabelledTextOptions::val_fraction,
                   "share of train held out for validation when val is null", InHalfOpenRange(0, 1))
            .Field("split_seed", &LabelledTextOptions::split_seed,
                   "seed of that split and of the batch shuffle of bucketing")
            .Field("max_length", &LabelledTextOptions::max_length,
                   "tokens kept per text (with <cls> and a model's sep); 0 keeps all", AtLeast(0))
            .Field("truncation_side", &LabelledTextOptions::truncation_side,
                   "where a longer text is cut: right keeps its beginning, left its end",
                   OneOf({"right", "left"}))
            .Field("add_cls", &LabelledTextOptions::add_cls,
                   "prepend the tokenizer's cls (for models that pool the first position; a "
                   "pretrained bert "
                   "frames its texts itself)")
            .Field("bucket_by_length", &LabelledTextOptions::bucket_by_length,
                   "training batches of similar lengths (less padding)")
            .Field("bucket_window", &LabelledTextOptions::bucket_window,
                   "batches sorted together when bucketing")),
    [](const LabelledTextOptions& o) -> absl::StatusOr<std::shared_ptr<data::DataModule>> {
      KILN_ASSIGN_OR_RETURN(auto tokenizer, Registry<Tokenizer>::Get().Instantiate(o.tokenizer));
      return std::make_shared<LabelledText>(o, std::move(tokenizer));
    });

}  // namespace
}  // namespace kiln::text
