#include "components/text/text_data_module.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"

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

}  // namespace kiln::text
