// Image classification: a registered model over images, cross-entropy (with label smoothing),
// accuracy and top-k accuracy; at test time a confusion matrix, per-class accuracy and macro-F1.
// Everything is ClassificationTask's; images need nothing of their own.
#include "lib/registry/registry.h"
#include "tasks/classification_task.h"

namespace kiln {
namespace {

struct ImageClassificationOptions : ClassificationOptions {
  ImageClassificationOptions() { top_k = 5; }
};

using O = ImageClassificationOptions;
KILN_REGISTER_BOUND(Task, "image_classification",
                    "Classify images: cross-entropy, accuracy, top-k accuracy; confusion matrix at test time",
                    ClassificationOptionBinding<O>("number of classes")
                        .Field("top_k", static_cast<int64_t O::*>(&ClassificationOptions::top_k),
                               "also report top-k accuracy (when k < num_classes)"),
                    [](const O& o) -> absl::StatusOr<std::shared_ptr<Task>> {
                      return std::make_shared<ClassificationTask>(o);
                    });

}  // namespace
}  // namespace kiln
