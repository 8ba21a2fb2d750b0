// Image classification: a registered model over images; its loss and metrics are the config's
// (configs/task/image_classification.yaml: cross-entropy with label smoothing; accuracy, top-5
// accuracy; at test time a confusion matrix, per-class accuracy and F1). Everything is
// ClassificationTask's; images need nothing of their own.
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"

namespace kiln {
namespace {

KILN_REGISTER_BOUND(
    Task, "image_classification",
    "Classify images: a loss and metrics as configured (cross-entropy; accuracy, top-k; "
    "confusion matrix at test time)",
    ClassificationOptionBinding<ClassificationOptions>("number of classes"),
    [](const ClassificationOptions& o) -> absl::StatusOr<std::shared_ptr<Task>> {
      return std::make_shared<ClassificationTask>(o);
    });

}  // namespace
}  // namespace kiln
