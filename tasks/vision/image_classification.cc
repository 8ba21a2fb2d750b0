// Image classification: a registered model over images; its loss and metrics are the config's
// (configs/task/image_classification.yaml: cross-entropy with label smoothing; accuracy, top-5
// accuracy; at test time a confusion matrix, per-class accuracy and F1). Everything is
// ClassificationTask's but a pretrained head taking the data's class names.
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"

namespace kiln {
namespace {

class ImageClassification : public ClassificationTask {
 public:
  using ClassificationTask::ClassificationTask;

 protected:
  // A pretrained head's classes are the data's from now on (what export writes as id2label), when
  // the data names them before its setup (data.class_names of IDX files; an image folder's
  // sub-folders are read at setup, later).
  absl::Status ConnectData(data::DataModule& data) override {
    if (!model().class_names().empty() && !data.class_names().empty())
      model().set_class_names(data.class_names());
    return absl::OkStatus();
  }
};

KILN_REGISTER_BOUND(
    Task, "image_classification",
    "Classify images: a loss and metrics as configured (cross-entropy; accuracy, top-k; "
    "confusion matrix at test time)",
    ClassificationOptionBinding<ClassificationOptions>("number of classes"),
    [](const ClassificationOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<ImageClassification>(o);
    });

}  // namespace
}  // namespace kiln
