// `sentencepiece`: a unigram or BPE SentencePiece model, loaded from `model_file`, or trained on
// the training split when none is given and cached in `cache_dir` under a key made of the corpus
// and the options, so the next run with the same data and options loads it in milliseconds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "components/text/sentencepiece_backend.h"
#include "components/text/tokenizer.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::text {
namespace {

struct SentencePieceOptions {
  std::string model_type = "unigram";
  int64_t vocab_size = 8000;
  std::optional<std::string> model_file;  // null: train
  std::string cache_dir = ".cache/kiln/tokenizers";
  double character_coverage = 0.9995;
  int64_t input_sentence_size = 100000;
  int64_t max_sentence_length = 4192;
  std::string normalization = "identity";
  int64_t num_threads = 0;
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(SentencePieceOptions options) : options_(std::move(options)) {}

  absl::Status Fit(const std::vector<std::string>& texts, const std::string& corpus_name) override {
    std::string serialized;
    if (!options_.model_file.value_or("").empty()) {
      KILN_ASSIGN_OR_RETURN(serialized, ReadFileToString(*options_.model_file));
      source_ = *options_.model_file;
    } else {
      KILN_ASSIGN_OR_RETURN(serialized, TrainOrLoadCached(texts, corpus_name));
    }
    std::string error;
    const spm::Backend* backend = spm::LoadBackend(&error);
    if (backend == nullptr)
      return absl::FailedPreconditionError(absl::StrCat("sentencepiece tokenizer: ", error));
    processor_ = backend->make_processor();
    error = processor_->Load(serialized);
    if (!error.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ": not a SentencePiece model: ", error));
    }
    // The shared special ids: a model trained elsewhere must reserve them the same way.
    for (int64_t id = 0; id < SpecialTokens::kCount; ++id) {
      if (processor_->PieceToId(SpecialTokens::Name(id)) != id) {
        return absl::InvalidArgumentError(absl::StrCat(
            source_, ": the SentencePiece model must have ", SpecialTokens::Name(id), " at id ", id,
            " (kiln's special ids: <pad> 0, <unk> 1, <s> 2, </s> 3, <cls> 4); train it with "
            "pad_id=0 unk_id=1 "
            "bos_id=2 eos_id=3 user_defined_symbols=<cls>"));
      }
    }
    if (processor_->size() > options_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, " has ", processor_->size(),
                       " pieces, more than tokenizer.vocab_size=", options_.vocab_size));
    }
    fingerprint_ = StableHash(serialized, StableHash("sentencepiece"));
    return absl::OkStatus();
  }

  bool LearnsFromTexts() const override { return options_.model_file.value_or("").empty(); }

  std::vector<int64_t> Encode(std::string_view text) const override {
    std::vector<int> ids = processor_->Encode(text);
    return std::vector<int64_t>(ids.begin(), ids.end());
  }

  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> kept;
    for (int64_t id : ids) {
      if (id >= SpecialTokens::kCount || id == SpecialTokens::kUnk)
        kept.push_back(static_cast<int>(id));
    }
    return processor_->Decode(kept);
  }

  int64_t vocab_size() const override { return options_.vocab_size; }
  uint64_t fingerprint() const override { return fingerprint_; }
  std::string Describe() const override {
    return absl::StrCat("sentencepiece ", options_.model_type, " tokenizer: ", processor_->size(),
                        " pieces from ", source_);
  }

 private:
  std::map<std::string, std::string> Flags() const {
    int64_t threads = options_.num_threads > 0
                          ? options_.num_threads
                          : static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    return {
        {"model_type", options_.model_type},
        {"vocab_size", std::to_string(options_.vocab_size)},
        {"character_coverage", absl::StrFormat("%g", options_.character_coverage)},
        {"input_sentence_size", std::to_string(options_.input_sentence_size)},
        {"shuffle_input_sentence", "true"},
        {"max_sentence_length", std::to_string(options_.max_sentence_length)},
        {"normalization_rule_name", options_.normalization},
        {"remove_extra_whitespaces", "false"},
        {"pad_id", "0"},
        {"unk_id", "1"},
        {"bos_id", "2"},
        {"eos_id", "3"},
        {"unk_piece", "<unk>"},
        {"pad_piece", "<pad>"},
        {"bos_piece", "<s>"},
        {"eos_piece", "</s>"},
        {"user_defined_symbols", "<cls>"},
        // Small corpora (tests, a few files) may not have vocab_size pieces; take what there is.
        {"hard_vocab_limit", "false"},
        {"num_threads", std::to_string(threads)},
        // Nothing on SentencePiece's own log: loaded as its own module (sentencepiece_backend.h),
        // it writes to a std::cerr that was never set up there, which crashes the process. Its
        // failures come back as a status; kiln says in its own log what it leaves out.
        {"minloglevel", "3"}};
  }

  absl::StatusOr<std::string> TrainOrLoadCached(const std::vector<std::string>& texts,
                                                const std::string& corpus_name) {
    std::map<std::string, std::string> flags = Flags();
    // The key: every option that changes the model (not the thread count) and every text.
    uint64_t key = StableHash("kiln-spm-v1");
    for (const auto& [k, v] : flags) {
      if (k != "num_threads" && k != "minloglevel")
        key = StableHash(absl::StrCat(k, "=", v, ";"), key);
    }
    for (const auto& t : texts) key = StableHash(t, StableHash("\x1e", key));
    std::string path = absl::StrFormat("%s/spm-%s-%d-%016x.model", options_.cache_dir,
                                       options_.model_type, options_.vocab_size, key);
    source_ = path;
    if (auto cached = ReadFileToString(path); cached.ok()) {
      Logger::Instance().Info(absl::StrCat("sentencepiece: cached model ", path));
      return cached;
    }
    // SentencePiece learns from "sentences": the lines of every training text. It leaves out a
    // line longer than max_sentence_length bytes, and so does kiln, before it: SentencePiece's
    // warning about one would write to a std::cerr that, loaded as its own module
    // (sentencepiece_backend.h), it cannot use, and crash.
    std::vector<std::string> sentences;
    int64_t too_long = 0;
    for (const auto& t : texts) {
      for (absl::string_view line : absl::StrSplit(t, '\n', absl::SkipWhitespace())) {
        if (static_cast<int64_t>(line.size()) > options_.max_sentence_length) {
          ++too_long;
          continue;
        }
        sentences.emplace_back(line);
      }
    }
    if (too_long > 0) {
      Logger::Instance().Warning(
          absl::StrCat("sentencepiece: ", too_long, " lines of ", corpus_name, " are longer than ",
                       options_.max_sentence_length,
                       " bytes (tokenizer.max_sentence_length) and are left out of the training"));
    }
    if (sentences.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(corpus_name, ": no text to train a SentencePiece model on"));
    }
    auto start = std::chrono::steady_clock::now();
    std::string model, error;
    const spm::Backend* backend = spm::LoadBackend(&error);
    if (backend == nullptr)
      return absl::FailedPreconditionError(absl::StrCat("sentencepiece tokenizer: ", error));
    error = backend->train(flags, sentences, &model);
    if (!error.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("training the SentencePiece model on ", corpus_name, " failed: ", error));
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    KILN_RETURN_IF_ERROR(MakeDirs(options_.cache_dir));
    KILN_RETURN_IF_ERROR(WriteFileAtomically(path, model));
    Logger::Instance().Info(absl::StrFormat(
        "sentencepiece: trained a %s model (vocab %d) on %d lines of %s in %.1f s: %s",
        options_.model_type, options_.vocab_size, sentences.size(), corpus_name, seconds, path));
    return model;
  }

  SentencePieceOptions options_;
  std::unique_ptr<spm::Processor> processor_;
  uint64_t fingerprint_ = 0;
  std::string source_;
};

KILN_REGISTER_BOUND(Tokenizer, "sentencepiece",
                    "SentencePiece unigram or BPE; trained on the training split (and cached) when "
                    "no model_file is given",
                    OptionBinding<SentencePieceOptions>()
                        .Field("model_type", &SentencePieceOptions::model_type, "unigram or bpe",
                               OneOf({"unigram", "bpe"}))
                        .Field("vocab_size", &SentencePieceOptions::vocab_size,
                               "pieces incl. the 5 specials", MoreThanSpecialTokens())
                        .Field("model_file", &SentencePieceOptions::model_file,
                               "a trained .model file (null: train on the training split)")
                        .Field("cache_dir", &SentencePieceOptions::cache_dir,
                               "where trained models are kept, keyed by corpus and options")
                        .Field("character_coverage", &SentencePieceOptions::character_coverage,
                               "share of characters the model covers; the rest become <unk>")
                        .Field("input_sentence_size", &SentencePieceOptions::input_sentence_size,
                               "lines sampled for training at most (0: all)")
                        .Field("max_sentence_length", &SentencePieceOptions::max_sentence_length,
                               "longer lines (bytes) are skipped in training")
                        .Field("normalization", &SentencePieceOptions::normalization,
                               "SentencePiece normalization rule: identity, nmt_nfkc, nfkc, ...")
                        .Field("num_threads", &SentencePieceOptions::num_threads,
                               "training threads (0: every core)"),
                    [](const SentencePieceOptions& o)
                        -> absl::StatusOr<std::shared_ptr<Tokenizer>> {
                      return std::make_shared<SentencePieceTokenizer>(o);
                    });

}  // namespace
}  // namespace kiln::text
