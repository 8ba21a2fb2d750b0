#include "tasks/nlp/tokenizer_binding.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln {

absl::StatusOr<std::shared_ptr<Model>> TokenizerBinding::BuildModel(const config::Config& job) {
  KILN_ASSIGN_OR_RETURN(config::Config model_cfg, job.Sub("model"));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<Model> model,
                        Registry<Model>::Get().Instantiate(model_cfg));
  model_ids_ = model->token_ids();
  framing_ = model->text_framing();
  model_name_ = model_cfg.GetOr<std::string>("_target_", "?").value_or("?");
  model->register_buffer("tokenizer_fingerprint", torch::zeros({2}, torch::kInt64));
  model_ = model.get();
  return model;
}

torch::Tensor TokenizerBinding::Buffer() const {
  return model_->named_buffers(/*recurse=*/false)["tokenizer_fingerprint"];
}

absl::Status TokenizerBinding::Connect(data::DataModule& data, const std::string& task) {
  data_ = dynamic_cast<text::TextDataModule*>(&data);
  if (data_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task '", task, "' needs a text data module (labelled_text or text_corpus) as data"));
  }
  KILN_ASSIGN_OR_RETURN(tokenizer_, data_->tokenizer());
  uint64_t fp = tokenizer_->fingerprint();
  std::memcpy(&fingerprint_, &fp, sizeof(fp));
  vocab_ = tokenizer_->vocab_size();
  if (model_ids_.size > 0 && vocab_ > model_ids_.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer's vocab_size (", vocab_, ") exceeds the model's ", model_ids_.option, " (",
        model_ids_.size, "); set model.", model_ids_.option, ": ${data.tokenizer.vocab_size}"));
  }
  if (framing_) {
    const text::SpecialIds special = tokenizer_->special_ids();
    const int64_t pad = special.pad >= 0 ? special.pad : text::SpecialTokens::kPad;
    if (pad != framing_->pad) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tokenizer pads with id ", pad, " (", tokenizer_->Describe(),
                       ") but model '", model_name_, "' masks id ", framing_->pad,
                       " as padding; give both the same folder (model.pretrained and "
                       "data.tokenizer.path), or set model.pad_token_id=",
                       pad));
    }
    data_->set_framing(framing_->cls, framing_->sep);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor buffer = Buffer();
  buffer[0] = fingerprint_;
  buffer[1] = vocab_;
  return absl::OkStatus();
}

absl::Status TokenizerBinding::Check() const {
  if (!tokenizer_)
    return absl::FailedPreconditionError("the task was not connected to its data module");
  torch::Tensor buffer = Buffer();
  const std::pair<const void*, int64_t> seen{buffer.data_ptr(),
                                             static_cast<int64_t>(buffer._version())};
  std::lock_guard<std::mutex> lock(checked_mu_);
  if (checked_ == seen) return absl::OkStatus();
  auto b = buffer.to(torch::kCPU);
  int64_t stored = b[0].item<int64_t>(), stored_vocab = b[1].item<int64_t>();
  if (stored == 0 || (stored == fingerprint_ && stored_vocab == vocab_)) {
    checked_ = seen;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("the checkpoint's model was trained with another tokenizer (fingerprint "
                      "%016x, vocab %d) than data.tokenizer gives "
                      "(%016x, vocab %d: %s); use the tokenizer options and training data it was "
                      "trained with, or its model_file",
                      static_cast<uint64_t>(stored), stored_vocab,
                      static_cast<uint64_t>(fingerprint_), vocab_, tokenizer_->Describe()));
}

}  // namespace kiln
