// `text_corpus`: language-modeling data from plain text files or shards. Each split's documents (a
// file, or a shard sample's KEY.txt) are tokenized into one contiguous stream (</s> between
// documents) and cut into blocks of block_size tokens, every `stride` tokens for training;
// evaluation blocks tile the stream once (the last one padded), so every token but the first is
// predicted exactly once and bits per character are exact. `kiln shard` writes a split's documents,
// one sample each, so the same corpus read from its shards gives the same stream.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/text/text_data_module.h"
#include "components/text/text_files.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::text {
namespace {

struct CorpusOptions : TextDataOptions {
  std::vector<std::string> train, val, test;
  int64_t block_size = 256;
  int64_t stride = 0;  // 0: block_size
};

// The documents of a split and the token stream they make.
struct Split {
  std::shared_ptr<const std::vector<std::string>> documents;
  torch::Tensor stream;
  int64_t chars = 0;
};

// Blocks of a token stream: input stream[s, s+T), target stream[s+1, s+T+1), s = index * stride;
// a block running past the end is padded with <pad> (0), which the loss ignores. Encoded gives
// the documents, what `kiln shard` writes.
class TokenBlocks : public data::Dataset {
 public:
  TokenBlocks(const Split& split, int64_t block, int64_t stride, bool cover_all)
      : documents_(split.documents), stream_(split.stream), block_(block), stride_(stride) {
    int64_t predicted = stream_.size(0) - 1;
    count_ = cover_all ? (predicted + stride_ - 1) / stride_
                       : (predicted >= block_ ? (predicted - block_) / stride_ + 1 : 0);
  }
  int64_t size() const override { return count_; }
  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng&) const override {
    int64_t start = index * stride_;
    int64_t n = std::min(block_, stream_.size(0) - 1 - start);
    data::Example e;
    e.input = torch::zeros({block_}, torch::kInt64);
    e.target = torch::zeros({block_}, torch::kInt64);
    e.input.narrow(0, 0, n).copy_(stream_.narrow(0, start, n));
    e.target.narrow(0, 0, n).copy_(stream_.narrow(0, start + 1, n));
    return e;
  }
  int64_t encoded_size() const override { return static_cast<int64_t>(documents_->size()); }
  absl::StatusOr<data::EncodedSample> Encoded(int64_t index) const override {
    return data::EncodedSample{{"txt", documents_->at(static_cast<size_t>(index))}};
  }

 private:
  std::shared_ptr<const std::vector<std::string>> documents_;
  torch::Tensor stream_;
  int64_t block_, stride_, count_;
};

class TextCorpus : public TextDataModule {
 public:
  TextCorpus(CorpusOptions o, std::shared_ptr<Tokenizer> tokenizer)
      : TextDataModule(std::move(tokenizer), o.loader()), o_(std::move(o)) {}

  absl::Status Setup(data::Stage stage) override {
    KILN_ASSIGN_OR_RETURN(auto tok, tokenizer());
    int64_t stride = o_.stride > 0 ? o_.stride : o_.block_size;
    if ((stage == data::Stage::kFit || stage == data::Stage::kValidate) && !train_) {
      KILN_ASSIGN_OR_RETURN(splits_["train"], Tokenize(*tok, o_.train, TrainingTextsCached()));
      train_ = std::make_shared<TokenBlocks>(splits_["train"], o_.block_size, stride, false);
      if (train_->size() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(absl::StrJoin(o_.train, ", "), ": ", splits_["train"].stream.size(0),
                         " tokens, fewer than data.block_size + 1 = ", o_.block_size + 1));
      }
      if (!o_.val.empty()) {
        KILN_ASSIGN_OR_RETURN(val_, EvalBlocks(*tok, "val", o_.val));
      }
    }
    if (stage == data::Stage::kTest && !test_ && !o_.test.empty()) {
      KILN_ASSIGN_OR_RETURN(test_, EvalBlocks(*tok, "test", o_.test));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const data::Dataset> test_dataset() const override { return test_; }

  int64_t block_size() const override { return o_.block_size; }
  double tokens_per_char(const std::string& split) const override {
    auto it = splits_.find(split);
    if (it == splits_.end() || it->second.chars == 0) return 0;
    return static_cast<double>(it->second.stream.size(0) - 1) /
           static_cast<double>(it->second.chars);
  }

 protected:
  absl::StatusOr<std::vector<std::string>> TrainingTexts() override {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadDocuments(o_.train));
    train_texts_ = texts;
    return texts;
  }
  std::string TrainingName() const override { return absl::StrJoin(o_.train, ", "); }

 private:
  // The training texts read for fitting the tokenizer, handed over once.
  std::vector<std::string> TrainingTextsCached() { return std::move(train_texts_); }

  absl::StatusOr<std::shared_ptr<TokenBlocks>> EvalBlocks(const Tokenizer& tok,
                                                          const std::string& name,
                                                          const std::vector<std::string>& files) {
    KILN_ASSIGN_OR_RETURN(splits_[name], Tokenize(tok, files, {}));
    if (splits_[name].stream.size(0) < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(absl::StrJoin(files, ", "), ": fewer than 2 tokens to evaluate on"));
    }
    return std::make_shared<TokenBlocks>(splits_[name], o_.block_size, o_.block_size, true);
  }

  // The documents of `files`, in order (a shard set gives each of its samples' texts).
  static absl::StatusOr<std::vector<std::string>> ReadDocuments(
      const std::vector<std::string>& files) {
    std::vector<std::string> documents;
    for (const auto& file : files) {
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadPlainTexts(file));
      for (auto& text : texts) documents.push_back(std::move(text));
    }
    return documents;
  }

  // One stream of the documents' tokens, the tokenizer's </s> between documents (kiln's id 3, a
  // pretrained tokenizer's own; none where it has none); `texts`: the documents of `files` when
  // already read (the training texts), else empty.
  absl::StatusOr<Split> Tokenize(const Tokenizer& tok, const std::vector<std::string>& files,
                                 std::vector<std::string> texts) {
    if (texts.empty()) {
      KILN_ASSIGN_OR_RETURN(texts, ReadDocuments(files));
    }
    Split split;
    std::vector<int64_t> ids;
    std::vector<std::vector<int64_t>> encoded = tok.EncodeAll(texts);
    const int64_t eos = tok.special_ids().eos;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (i > 0 && eos >= 0) ids.push_back(eos);
      ids.insert(ids.end(), encoded[i].begin(), encoded[i].end());
      split.chars += CountCodePoints(texts[i]);
    }
    split.stream = torch::tensor(ids, torch::kInt64);
    split.documents = std::make_shared<const std::vector<std::string>>(std::move(texts));
    return split;
  }

  CorpusOptions o_;
  std::vector<std::string> train_texts_;
  std::map<std::string, Split> splits_;
  std::shared_ptr<TokenBlocks> train_, val_, test_;
};

KILN_REGISTER_BOUND(
    data::DataModule, "text_corpus",
    "Language-modeling data: plain text files as one token stream cut into blocks (block_size, "
    "stride)",
    AddTextDataOptions(OptionBinding<CorpusOptions>()
                           .Required("train", &CorpusOptions::train,
                                     "training text files or shards (KEY.txt per document)",
                                     NonEmpty())
                           .Field("val", &CorpusOptions::val, "validation text files or shards")
                           .Field("test", &CorpusOptions::test, "test text files or shards")
                           .Field("block_size", &CorpusOptions::block_size,
                                  "tokens per training example (the model's context)", AtLeast(1))
                           .Field("stride", &CorpusOptions::stride,
                                  "tokens between training blocks (0: block_size, no overlap)",
                                  AtLeast(0))),
    [](const CorpusOptions& o) -> absl::StatusOr<std::shared_ptr<data::DataModule>> {
      KILN_ASSIGN_OR_RETURN(auto tokenizer, Registry<Tokenizer>::Get().Instantiate(o.tokenizer));
      return std::make_shared<TextCorpus>(o, std::move(tokenizer));
    });

}  // namespace
}  // namespace kiln::text
