#include "components/text/text_data_module.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/core/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::text {

absl::StatusOr<std::shared_ptr<const Tokenizer>> TextDataModule::tokenizer() {
  if (!fitted_) {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> texts, TrainingTexts());
    auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(tokenizer_->Fit(texts, TrainingName()));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fitted_ = true;
    Logger::Instance().Info(absl::StrFormat("%s (%.2f s)", tokenizer_->Describe(), seconds));
  }
  return std::shared_ptr<const Tokenizer>(tokenizer_);
}

OptionSchema& AddTextDataOptions(OptionSchema& schema) {
  return schema
      .Required("tokenizer", OptionType::kMap,
                "the tokenizer: {_target_: char|whitespace|sentencepiece, ...}")
      .Int("batch_size", 32, "sequences per batch")
      .Int("num_workers", 1, "threads collating batches (0: on the training thread)")
      .Int("prefetch", 4, "batches prepared ahead at most");
}

absl::StatusOr<std::shared_ptr<Tokenizer>> ReadTokenizer(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(config::Config node, cfg.Sub("tokenizer"));
  return Registry<Tokenizer>::Get().Instantiate(node);
}

absl::StatusOr<data::LoaderOptions> ReadTextLoaderOptions(const config::Config& cfg) {
  data::LoaderOptions o;
  KILN_ASSIGN_OR_RETURN(o.batch_size, cfg.Get<int64_t>("batch_size"));
  KILN_ASSIGN_OR_RETURN(o.num_workers, cfg.Get<int>("num_workers"));
  KILN_ASSIGN_OR_RETURN(o.prefetch, cfg.Get<int>("prefetch"));
  if (o.batch_size < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("option '", cfg.FullKey("batch_size"), "' must be positive"));
  return o;
}

}  // namespace kiln::text
