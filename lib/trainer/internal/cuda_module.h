// kiln's CUDA code (the device's banner and properties, trainer.cuda_graphs, NCCL) is a module of
// its own, libkiln_cuda: the one kiln library that links LibTorch's CUDA libraries (libtorch_cuda
// and, through it, cuBLAS, cuDNN and NCCL). kiln_engine links LibTorch's CPU libraries alone.
// Loading the CUDA ones costs a process 0.2-0.4 s of start-up, for nothing on a machine without a
// GPU, and every kiln command and test is a process; so kiln_engine loads the module as it is
// loaded itself, and only where a GPU can be used: where CUDA's driver (libcuda.so.1) is
// installed. LibTorch then has CUDA as if linked to it (torch::cuda::is_available(), tensors on
// "cuda", in kiln and in a program that links kiln); elsewhere it is LibTorch for the CPU.
//
//   KILN_LOAD_CUDA=0  never loads the module
//   KILN_LOAD_CUDA=1  always loads it (a warning line where it cannot be)
//
// The module's parts register themselves with their owners here as it loads: the device
// functions below, CudaGraphStep's Impl (cuda_graph_step.h), the NCCL backend
// (lib/distributed/internal/nccl_backend.h).
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace kiln {

// Whether libkiln_cuda is loaded in this process.
bool CudaModuleLoaded();
// Why it is not loaded, in a few words for an error line ("no CUDA driver (libcuda.so.1) on this
// machine"); "" when it is.
std::string CudaModuleNote();
// "no CUDA device is available", and why when it is the module's absence: for the errors of a
// run that asks for a GPU.
std::string NoCudaDeviceAvailable();

// The device functions of process_settings.h that need CUDA's runtime.
struct CudaModuleHooks {
  std::string (*device_note)(const c10::Device& device);
  bool (*has_bf16)(const c10::Device& device);
  void (*use_device)(const c10::Device& device);
};
// Null until libkiln_cuda is loaded.
const CudaModuleHooks* GetCudaModuleHooks();
void SetCudaModuleHooks(const CudaModuleHooks* hooks);

}  // namespace kiln
