// Text classification: a registered text model over padded token ids; loss and metrics as
// configured (cross-entropy, accuracy; at test time a confusion matrix, per-class accuracy and
// macro-F1). What texts add to ClassificationTask: the model takes its vocabulary from the
// data's tokenizer, and the labels are known once the training split is read.
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"
#include "tasks/nlp/tokenizer_binding.h"

namespace kiln {
namespace {

class TextClassification : public ClassificationTask {
 public:
  using ClassificationTask::ClassificationTask;

 protected:
  absl::Status ConnectData(data::DataModule& data) override {
    KILN_RETURN_IF_ERROR(binding_.Connect(data, "text_classification"));
    KILN_RETURN_IF_ERROR(data.Setup(data::Stage::kFit));
    KILN_RETURN_IF_ERROR(CheckClassNames(data.class_names(), "labels"));
    // A pretrained head's classes are the data's from now on (what export writes as id2label).
    if (!model().class_names().empty() && !data.class_names().empty())
      model().set_class_names(data.class_names());
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<Model>> BuildModel(const config::Config& job) override {
    return binding_.BuildModel(job);
  }
  absl::StatusOr<torch::Tensor> Forward(const data::Batch& batch) override {
    KILN_RETURN_IF_ERROR(binding_.Check());
    return model().forward(batch.input);
  }
  absl::StatusOr<std::map<std::string, std::string>> TokenizerFiles() const override {
    return binding_.HuggingFaceFiles();
  }

 private:
  TokenizerBinding binding_;
};

KILN_REGISTER_BOUND(
    Task, "text_classification",
    "Classify texts: a loss and metrics as configured (cross-entropy, accuracy; confusion "
    "matrix, per-class accuracy and macro-F1 at test time)",
    ClassificationOptionBinding<ClassificationOptions>("number of classes (the data's labels)"),
    [](const ClassificationOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<TextClassification>(o);
    });

}  // namespace
}  // namespace kiln
