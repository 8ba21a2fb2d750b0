// libkiln_cuda's device functions, and the registration of everything the module implements
// (lib/trainer/internal/cuda_module.h). Part of libkiln_cuda (lib/CMakeLists.txt), which links
// LibTorch's CUDA libraries.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "lib/distributed/internal/nccl_backend.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/internal/cuda_module.h"

namespace kiln {
namespace {

c10::DeviceIndex IndexOf(const c10::Device& device) {
  return device.has_index() ? device.index() : 0;
}

std::string DeviceNote(const c10::Device& device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(IndexOf(device));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); };
  return absl::StrCat(" (", prop->name, ", compute capability ", prop->major, ".", prop->minor,
                      ", driver ", version(driver), ", CUDA ", version(runtime), ", cuDNN ",
                      at::detail::getCUDAHooks().versionCuDNN(), ")");
}

bool HasBf16(const c10::Device& device) {
  return at::cuda::getDeviceProperties(IndexOf(device))->major >= 8;
}

void UseDevice(const c10::Device& device) { c10::cuda::set_device(device.index()); }

const CudaModuleHooks kHooks = {&DeviceNote, &HasBf16, &UseDevice};

// As the module loads (inside kiln_engine's dlopen of it).
[[maybe_unused]] const bool kRegistered = [] {
  CudaGraphStep::SetImplMaker(&MakeCudaGraphStepImpl);
  distributed::SetNcclBackendMaker(&distributed::MakeNcclBackend);
  SetCudaModuleHooks(&kHooks);
  return true;
}();

}  // namespace
}  // namespace kiln
