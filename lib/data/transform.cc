#include "lib/data/transform.h"

#include "absl/strings/str_cat.h"
#include "lib/data/datamodule.h"
#include "lib/registry/registry.h"

namespace kiln::data {

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kFit: return "fit";
    case Stage::kValidate: return "validate";
    case Stage::kTest: return "test";
    case Stage::kPredict: return "predict";
  }
  return "?";
}

absl::StatusOr<TransformPipeline> TransformPipeline::FromConfig(const config::Config& parent,
                                                                const std::string& key) {
  if (!parent.Has(key)) return TransformPipeline();
  KILN_ASSIGN_OR_RETURN(config::NodePtr node, parent.Get<config::NodePtr>(key));
  return FromList(config::Config(node, parent.FullKey(key)));
}

absl::StatusOr<TransformPipeline> TransformPipeline::FromList(const config::Config& list) {
  const config::NodePtr& node = list.node();
  if (node->is_null()) return TransformPipeline();
  if (!node->is_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", list.prefix(), "' must be a list of transforms ({_target_: ...})"));
  }
  std::vector<std::shared_ptr<Transform>> steps;
  for (size_t i = 0; i < node->items().size(); ++i) {
    KILN_ASSIGN_OR_RETURN(config::Config item, list.Sub(std::to_string(i)));
    KILN_ASSIGN_OR_RETURN(auto step, Registry<Transform>::Get().Instantiate(item));
    steps.push_back(std::move(step));
  }
  return TransformPipeline(std::move(steps));
}

bool TransformPipeline::deterministic() const {
  for (const auto& step : steps_) {
    if (!step->deterministic()) return false;
  }
  return true;
}

torch::Tensor TransformPipeline::Apply(torch::Tensor image, SampleRng& rng) const {
  return ApplyFrom(0, std::move(image), rng);
}

size_t TransformPipeline::FoldFrom(size_t first, Transform::PixelMap& map, int64_t channels,
                                   SampleRng& rng) const {
  size_t i = first;
  while (i < steps_.size() && steps_[i]->FoldInto(map, channels, rng)) ++i;
  return i;
}

torch::Tensor TransformPipeline::ApplyFrom(size_t first, torch::Tensor image,
                                           SampleRng& rng) const {
  for (size_t i = first; i < steps_.size(); ++i) image = steps_[i]->Apply(std::move(image), rng);
  return image;
}

}  // namespace kiln::data
