// What the text data modules (labelled_text, text_corpus) share: a tokenizer fitted on the
// training split on first use — tasks take it to size and check models, and to generate — and the
// loader options each declares.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "components/text/text_files.h"
#include "components/text/tokenizer.h"
#include "lib/config/config.h"
#include "lib/data/batching_options.h"
#include "lib/data/datamodule.h"
#include "lib/registry/options.h"

namespace kiln::text {

class TextDataModule : public data::DataModule {
 public:
  TextDataModule(std::shared_ptr<Tokenizer> tokenizer, data::LoaderOptions loader)
      : tokenizer_(std::move(tokenizer)), loader_(std::move(loader)) {}

  // The tokenizer, fitted on the training texts the first time it is asked for.
  absl::StatusOr<std::shared_ptr<const Tokenizer>> tokenizer();
  // Predicted tokens per character of a split ("train", "val", "test"), so a task can turn a mean
  // token loss into bits per character; 0 when unknown.
  virtual double tokens_per_char(const std::string& /*split*/) const { return 0; }
  // The tokens in a training example when the module cuts a token stream into fixed blocks; 0
  // when examples keep their own lengths.
  virtual int64_t block_size() const { return 0; }
  data::LoaderOptions loader_options() const override { return loader_; }
  // The training split's texts (for a task's own statistics, e.g. a decoding language model).
  absl::StatusOr<std::vector<std::string>> training_texts() { return TrainingTexts(); }
  // Frames every row as the model wants it, before Setup: the tokenizer's cls token first, its
  // sep token last (a pretrained BERT's [CLS] text [SEP]). Modules that cut a stream ignore it.
  void set_framing(bool cls, bool sep) {
    frame_cls_ = cls;
    frame_sep_ = sep;
  }

 protected:
  // The training texts and a name for them in messages ("data/text/spam/train.jsonl").
  virtual absl::StatusOr<std::vector<std::string>> TrainingTexts() = 0;
  virtual std::string TrainingName() const = 0;
  data::LoaderOptions& mutable_loader() { return loader_; }
  bool frame_cls() const { return frame_cls_; }
  bool frame_sep() const { return frame_sep_; }

 private:
  std::shared_ptr<Tokenizer> tokenizer_;
  bool fitted_ = false;
  bool frame_cls_ = false, frame_sep_ = false;
  data::LoaderOptions loader_;
};

// `records` split at random (seed) into the training records and a held-out share
// (`val_fraction`) for validation, as the modules do when no validation file is given.
std::pair<std::vector<TextRecord>, std::vector<TextRecord>> HoldOut(
    const std::vector<TextRecord>& records, double val_fraction, int64_t seed);

// The tokenizer and loader options each text data module declares; its options struct derives
// from this one.
struct TextDataOptions : data::BatchingOptions {
  config::Config tokenizer;  // {_target_: char|whitespace|sentencepiece|pretrained, ...},
                             // instantiated by the factory
};

// Declares tokenizer, batch_size, num_workers and prefetch on S, after the options `binding`
// already has.
template <typename S>
OptionBinding<S> AddTextDataOptions(OptionBinding<S> binding) {
  static_assert(std::is_base_of_v<TextDataOptions, S>);
  using T = TextDataOptions;
  return data::AddBatchingOptions(
      binding.RequiredNode(
          "tokenizer", static_cast<config::Config S::*>(&T::tokenizer), OptionType::kMap,
          "the tokenizer: {_target_: char|whitespace|sentencepiece|pretrained, ...}"),
      "sequences");
}

}  // namespace kiln::text
