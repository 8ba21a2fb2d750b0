#include "lib/trainer/process_settings.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/trainer/internal/cuda_module.h"

namespace kiln {

namespace {
bool UserTunesMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}
}  // namespace

// Training allocates and frees the same large activation and gradient buffers at every step.
// glibc serves blocks over its mmap threshold with fresh mappings, unmaps them when freed, and
// trims the heap's free top, so each step faults the same pages in again (experiment=mobydick_gpt
// trains about 1.5x slower so). Keep freed memory for reuse instead: serve blocks up to 32 MiB (the
// most glibc allows) from the heap and never trim it on its own: the trainer gives the memory back
// at each epoch's end and `kiln serve` every 30 s (ReturnFreedMemory). A user's own GLIBC_TUNABLES
// for malloc wins.
void KeepFreedMemoryForReuse() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (UserTunesMalloc()) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, -1);  // stored unsigned: no trimming
  });
}

void ReturnFreedMemory() {
  if (!UserTunesMalloc()) malloc_trim(0);
}

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
