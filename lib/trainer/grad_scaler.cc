#include "lib/trainer/grad_scaler.h"

namespace kiln {

GradScaler::GradScaler(torch::Device device, Options options)
    : options_(options),
      scale_(torch::full({1}, options.init_scale,
                         torch::TensorOptions(torch::kFloat32).device(device))),
      growth_tracker_(torch::zeros({1}, torch::TensorOptions(torch::kInt32).device(device))),
      found_inf_(torch::zeros({1}, torch::TensorOptions(torch::kFloat32).device(device))) {}

bool GradScaler::UnscaleAndCheck(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  found_inf_.zero_();
  torch::Tensor inv_scale = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
  // ATen's kernel takes the gradients of one device and dtype at a time.
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  std::vector<std::vector<torch::Tensor>> groups;
  for (const torch::Tensor& g : grads) {
    bool placed = false;
    for (auto& group : groups) {
      if (group[0].device() == g.device() && group[0].scalar_type() == g.scalar_type()) {
        group.push_back(g);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({g});
  }
  for (auto& group : groups) {
    if (group[0].device() == found_inf_.device()) {
      at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf_, inv_scale);
      continue;
    }
    // Gradients elsewhere (fsdp's pieces offloaded to the CPU): checked there, the finding added.
    torch::Tensor found = torch::zeros_like(found_inf_, group[0].device());
    at::_amp_foreach_non_finite_check_and_unscale_(group, found, inv_scale.to(group[0].device()));
    found_inf_.add_(found.to(found_inf_.device()));
  }
  bool found = found_inf_.item<float>() > 0;
  if (found) ++skipped_;
  return found;
}

void GradScaler::Update() {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
}

void GradScaler::Save(torch::serialize::OutputArchive& archive) const {
  archive.write("scaler/scale", scale_.cpu());
  archive.write("scaler/growth_tracker", growth_tracker_.cpu());
}

bool GradScaler::Load(torch::serialize::InputArchive& archive) {
  torch::Tensor scale, tracker;
  if (!archive.try_read("scaler/scale", scale) ||
      !archive.try_read("scaler/growth_tracker", tracker))
    return false;
  torch::NoGradGuard no_grad;
  scale_.copy_(scale.reshape({1}));
  growth_tracker_.copy_(tracker.reshape({1}));
  return true;
}

}  // namespace kiln
