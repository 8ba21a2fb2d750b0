// `pretrained`: the tokenizer of a Hugging Face model folder, its ids the model's own. The folder's
// tokenizer.json is read natively (hf_tokenizer.h); a folder with only a SentencePiece
// tokenizer.model (Llama 2, XLM-R) is read through kiln's SentencePiece module, its special ids
// those the model has. Fit ignores the texts.
#include "absl/strings/str_cat.h"
#include "components/text/hf_tokenizer.h"
#include "components/text/sentencepiece_backend.h"
#include "components/text/tokenizer.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::text {
// Its own namespace: a unity build compiles the text sources as one unit.
namespace pretrained {
namespace {

struct PretrainedTokenizerOptions {
  std::string path;
};

class PretrainedTokenizer : public Tokenizer {
 public:
  explicit PretrainedTokenizer(PretrainedTokenizerOptions options) : options_(std::move(options)) {}

  absl::Status Fit(const std::vector<std::string>&, const std::string&) override {
    const std::string& dir = options_.path;
    if (!IsRegularFile(dir + "/tokenizer.json") && IsRegularFile(dir + "/tokenizer.model")) {
      // fairseq's tokenizers (XLM-R, CamemBERT) shift SentencePiece's ids in transformers' code,
      // not in the file: read as is, their ids would not be the model's.
      const std::string config =
          ReadFileToString(dir + "/tokenizer_config.json").value_or(std::string());
      for (const char* shifted : {"XLMRobertaTokenizer", "CamembertTokenizer"}) {
        if (config.find(shifted) != std::string::npos) {
          return absl::InvalidArgumentError(absl::StrCat(
              dir, "/tokenizer.model: a ", shifted,
              "'s ids are SentencePiece's shifted by fairseq's offset, which kiln does not "
              "apply; give the folder the tokenizer.json that transformers saves for it"));
        }
      }
      return LoadSentencePiece(dir + "/tokenizer.model");
    }
    auto hf = HfTokenizer::LoadFolder(dir);
    if (!hf.ok()) return hf.status();
    hf_ = *std::move(hf);
    source_ = dir + "/tokenizer.json";
    fingerprint_ =
        StableHash(ReadFileToString(source_).value_or(std::string()), StableHash("pretrained"));
    vocab_size_ = hf_->vocab_size();
    special_ = hf_->special_ids();
    return absl::OkStatus();
  }

  bool LearnsFromTexts() const override { return false; }

  std::vector<int64_t> Encode(std::string_view text) const override {
    if (hf_) return hf_->Encode(text, /*add_special_tokens=*/false);
    std::vector<int> ids = spm_->Encode(text);
    return std::vector<int64_t>(ids.begin(), ids.end());
  }

  std::string Decode(const std::vector<int64_t>& ids) const override {
    if (hf_) return hf_->Decode(ids, /*skip_special_tokens=*/true);
    std::vector<int> kept;
    for (int64_t id : ids) {
      if (id >= 0 && id < vocab_size_) kept.push_back(static_cast<int>(id));
    }
    return spm_->Decode(kept);
  }

  int64_t vocab_size() const override { return vocab_size_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  SpecialIds special_ids() const override { return special_; }
  // The folder's own tokenizer files, as they are.
  absl::StatusOr<std::map<std::string, std::string>> HuggingFaceFiles() const override {
    std::map<std::string, std::string> files;
    for (const char* name :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
          "tokenizer.model", "sentencepiece.bpe.model", "vocab.json", "merges.txt", "vocab.txt"}) {
      absl::StatusOr<std::string> bytes = ReadFileToString(options_.path + "/" + name);
      if (absl::IsNotFound(bytes.status())) continue;
      if (!bytes.ok()) return bytes.status();
      files[name] = *std::move(bytes);
    }
    return files;
  }
  std::string Describe() const override {
    return absl::StrCat("pretrained ", hf_ ? hf_->model_type() : "SentencePiece",
                        " tokenizer: ", vocab_size_, " ids from ", source_);
  }

 private:
  absl::Status LoadSentencePiece(const std::string& path) {
    std::string error;
    const spm::Backend* backend = spm::LoadBackend(&error);
    if (backend == nullptr)
      return absl::FailedPreconditionError(absl::StrCat("pretrained tokenizer: ", error));
    spm_ = backend->make_processor();
    std::string serialized;
    KILN_ASSIGN_OR_RETURN(serialized, ReadFileToString(path));
    error = spm_->Load(serialized);
    if (!error.empty())
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a SentencePiece model: ", error));
    source_ = path;
    fingerprint_ = StableHash(serialized, StableHash("pretrained"));
    vocab_size_ = spm_->size();
    // The model's own special pieces; PieceToId gives the unknown id for a piece it lacks.
    const int unk = spm_->PieceToId("<unk>");
    auto id = [&](const char* piece) -> int64_t {
      const int i = spm_->PieceToId(piece);
      return i == unk && std::string(piece) != "<unk>" ? -1 : i;
    };
    special_ = {id("<pad>"), id("<unk>"), id("<s>"), id("</s>"), -1};
    return absl::OkStatus();
  }

  PretrainedTokenizerOptions options_;
  std::unique_ptr<HfTokenizer> hf_;
  std::unique_ptr<spm::Processor> spm_;
  std::string source_;
  uint64_t fingerprint_ = 0;
  int64_t vocab_size_ = 0;
  SpecialIds special_;
};

KILN_REGISTER_BOUND(
    Tokenizer, "pretrained",
    "A Hugging Face model folder's tokenizer (tokenizer.json: byte-level BPE, WordPiece, "
    "Unigram; or tokenizer.model: SentencePiece) with the model's own ids",
    OptionBinding<PretrainedTokenizerOptions>().Field(
        "path", &PretrainedTokenizerOptions::path,
        "the folder (tokenizer.json, tokenizer_config.json; or tokenizer.model)"),
    [](const PretrainedTokenizerOptions& o) -> absl::StatusOr<std::shared_ptr<Tokenizer>> {
      return std::make_shared<PretrainedTokenizer>(o);
    });

}  // namespace
}  // namespace pretrained
}  // namespace kiln::text
