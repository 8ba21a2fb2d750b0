// Ties a text model to the tokenizer it was trained with: the tokenizer's fingerprint and id space
// live in a model buffer (`tokenizer_fingerprint`, saved in checkpoints), and a checkpoint whose
// buffer differs from the configured tokenizer is refused with one line instead of giving garbage.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "components/models/model.h"
#include "components/text/text_data_module.h"
#include "lib/config/config.h"
#include "lib/data/datamodule.h"

namespace kiln {

class TokenizerBinding {
 public:
  // Instantiates the job's `model` and adds the buffer to it (before it is checkpointed or
  // loaded). Connect checks the tokenizer against the ids the model declares (Model::token_ids).
  absl::StatusOr<std::shared_ptr<Model>> BuildModel(const config::Config& job);
  // Takes the tokenizer from a text data module (fitting it if need be), checks that its ids fit
  // the model's id space (and its pad id the one the model masks), asks the module for the
  // framing the model wants (Model::text_framing), and records the tokenizer in the buffer.
  absl::Status Connect(data::DataModule& data, const std::string& task);
  // Whether the buffer (perhaps loaded from a checkpoint) names the connected tokenizer. The
  // buffer is read once per change (its storage and version counter: a load, a move to a device):
  // every training step calls this, and on a GPU each read would wait for the device (and a CUDA
  // graph's capture refuses it).
  absl::Status Check() const;

  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  // The connected tokenizer's files for transformers (Tokenizer::HuggingFaceFiles); none before
  // Connect.
  absl::StatusOr<std::map<std::string, std::string>> HuggingFaceFiles() const {
    if (!tokenizer_) return std::map<std::string, std::string>();
    return tokenizer_->HuggingFaceFiles();
  }
  // The model's registered name (its _target_), for messages.
  const std::string& model_name() const { return model_name_; }
  text::TextDataModule* data() const { return data_; }

 private:
  // The buffer as the model holds it now (moving the model to a device replaces it).
  torch::Tensor Buffer() const;

  torch::nn::Module* model_ = nullptr;  // holds the int64 [2] buffer: fingerprint bits, vocab_size
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  text::TextDataModule* data_ = nullptr;
  int64_t fingerprint_ = 0, vocab_ = 0;
  TokenIds model_ids_;                  // what the model declares (size <= 0: not checked)
  std::optional<TextFraming> framing_;  // the rows the model wants (none: the data's own)
  std::string model_name_;
  // The buffer as last checked and found to match: its storage and version.
  mutable std::mutex checked_mu_;
  mutable std::optional<std::pair<const void*, int64_t>> checked_;
};

}  // namespace kiln
