#include "components/text/text_data_module.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/data/dataset.h"
#include "lib/logging/logger.h"

namespace kiln::text {

absl::StatusOr<std::shared_ptr<const Tokenizer>> TextDataModule::tokenizer() {
  if (!fitted_) {
    std::vector<std::string> texts;
    if (tokenizer_->LearnsFromTexts()) {
      KILN_ASSIGN_OR_RETURN(texts, TrainingTexts());
    }
    auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(tokenizer_->Fit(texts, TrainingName()));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fitted_ = true;
    Logger::Instance().Info(absl::StrFormat("%s (%.2f s)", tokenizer_->Describe(), seconds));
  }
  return std::shared_ptr<const Tokenizer>(tokenizer_);
}

std::pair<std::vector<TextRecord>, std::vector<TextRecord>> HoldOut(
    const std::vector<TextRecord>& records, double val_fraction, int64_t seed) {
  auto [train_idx, val_idx] =
      data::RandomSplit(static_cast<int64_t>(records.size()), val_fraction, seed);
  std::pair<std::vector<TextRecord>, std::vector<TextRecord>> out;
  for (int64_t i : train_idx) out.first.push_back(records[static_cast<size_t>(i)]);
  for (int64_t i : val_idx) out.second.push_back(records[static_cast<size_t>(i)]);
  return out;
}

}  // namespace kiln::text
