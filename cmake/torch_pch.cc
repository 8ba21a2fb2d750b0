// The one source of kiln_torch_pch (lib/CMakeLists.txt): a target that only carries the
// precompiled <torch/torch.h> that kiln's LibTorch libraries share.
namespace kiln::build {
int torch_pch_anchor = 0;
}  // namespace kiln::build
