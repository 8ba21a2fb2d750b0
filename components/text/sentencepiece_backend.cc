// libkiln_sentencepiece.so: the SentencePiece processor and trainer behind spm::Backend.
#include "components/text/sentencepiece_backend.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <unordered_map>

namespace kiln::text::spm {
namespace {

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return next_ >= sentences_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return sentences_[next_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::vector<std::string>& sentences_;
  size_t next_ = 0;
};

class SentencePieceProcessor : public Processor {
 public:
  std::string Load(const std::string& serialized) override {
    // A corrupt model can also throw: SentencePiece's double-array builder (darts) throws on a
    // piece it cannot insert (an empty one) instead of returning a status.
    try {
      auto status = processor_.LoadFromSerializedProto(serialized);
      return status.ok() ? "" : status.ToString();
    } catch (const std::exception& e) {
      return std::string("corrupt SentencePiece model: ") + e.what();
    }
  }
  std::vector<int> Encode(std::string_view text) const override {
    std::vector<int> ids;
    processor_.Encode(text, &ids).IgnoreError();
    return ids;
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string text;
    processor_.Decode(ids, &text).IgnoreError();
    return text;
  }
  int PieceToId(const std::string& piece) const override { return processor_.PieceToId(piece); }
  int size() const override { return processor_.GetPieceSize(); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

std::unique_ptr<Processor> MakeProcessor() { return std::make_unique<SentencePieceProcessor>(); }

std::string Train(const std::map<std::string, std::string>& flags,
                  const std::vector<std::string>& sentences, std::string* model) {
  std::unordered_map<std::string, std::string> args(flags.begin(), flags.end());
  VectorIterator iterator(sentences);
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &iterator, model);
  return status.ok() ? "" : status.ToString();
}

const Backend kBackend = {MakeProcessor, Train};

}  // namespace
}  // namespace kiln::text::spm

extern "C" __attribute__((visibility("default"))) const kiln::text::spm::Backend*
kiln_sentencepiece_backend() {
  return &kiln::text::spm::kBackend;
}
