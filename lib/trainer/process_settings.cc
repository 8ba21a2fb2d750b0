#include "lib/trainer/process_settings.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/trainer/internal/cuda_module.h"

namespace kiln {

int ConfigureProcess(int num_threads, int local_workers) {
  KeepFreedMemoryForReuse();
  // LibTorch defaults to one thread here; trainer.num_threads (null) means every core.
  int threads = num_threads;
  if (threads <= 0) {
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, local_workers));
  }
  at::set_num_threads(threads);
  return threads;
}

std::string BlasKernelsNote() {
  std::string blas = at::hasMKL() ? "MKL" : "";
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (blas.empty() && core_name != nullptr && core_name() != nullptr)
    blas = absl::StrCat("OpenBLAS ", core_name());
  std::string capability = at::get_cpu_capability();
  return absl::StrCat(" (", blas.empty() ? "" : absl::StrCat(blas, ", "), capability, " kernels)");
}

std::string CudaDeviceNote(const c10::Device& device) {
  const CudaModuleHooks* cuda = GetCudaModuleHooks();
  return cuda != nullptr && device.is_cuda() ? cuda->device_note(device) : "";
}

bool CudaHasBf16(const c10::Device& device) {
  const CudaModuleHooks* cuda = GetCudaModuleHooks();
  return cuda != nullptr && device.is_cuda() && cuda->has_bf16(device);
}

void UseCudaDevice(const c10::Device& device) {
  const CudaModuleHooks* cuda = GetCudaModuleHooks();
  if (cuda != nullptr && device.is_cuda() && device.has_index()) cuda->use_device(device);
}

void SetMathModes(const std::string& matmul_precision, bool cudnn_benchmark) {
  at::globalContext().setFloat32MatmulPrecision(matmul_precision);
  at::globalContext().setBenchmarkCuDNN(cudnn_benchmark);
}

}  // namespace kiln
