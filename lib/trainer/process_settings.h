// Everything kiln changes for the whole process rather than for one Trainer, in one place:
//   - the number of intra-op threads LibTorch uses (at::set_num_threads),
//   - glibc malloc keeping freed memory for reuse (mmap threshold 32 MiB, no trimming of its own;
//     ReturnFreedMemory gives it back at points the caller chooses),
//   - float32 matmul precision (TF32 on CUDA) and cuDNN's benchmark mode,
//   - handlers for SIGINT, SIGTERM and SIGUSR1 while a fit runs (a graceful stop;
//   lib/base/stop_signals.h).
// The Trainer applies them when it fits, evaluates or predicts; library users get them too, and
// a user's GLIBC_TUNABLES for malloc wins. docs/training.md ("Memory") says why.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "lib/base/freed_memory.h"  // KeepFreedMemoryForReuse, ReturnFreedMemory
#include "lib/base/stop_signals.h"  // StopSignals, CheckStopSignal (the trainer's users take them from here)

namespace kiln {

// Sets the thread count (`num_threads` <= 0: every core, shared among `local_workers` processes
// on this machine) and the allocator settings; returns the thread count.
int ConfigureProcess(int num_threads, int local_workers);

// " (MKL, AVX512 kernels)": LibTorch's BLAS (MKL in PyPI's wheel; OpenBLAS with the kernel set it
// picked, from OPENBLAS_CORETYPE or the CPU, in a build that uses it) and the CPU capability its
// own kernels dispatch to (ATen's, as torch.backends.cpu.get_cpu_capability()): for the training
// log.
std::string BlasKernelsNote();

// " (NVIDIA H100 80GB HBM3, compute capability 9.0, driver 13.0, CUDA 13.0, cuDNN 91900)" for a
// CUDA device of a build with CUDA; "" otherwise: for the training log.
std::string CudaDeviceNote(const c10::Device& device);
// Whether a CUDA device has bf16 units (compute capability 8.0 or newer); false without CUDA.
bool CudaHasBf16(const c10::Device& device);
// Makes `device` this thread's current CUDA device (where unindexed allocations and streams go);
// nothing for the CPU.
void UseCudaDevice(const c10::Device& device);
// trainer.matmul_precision and trainer.cudnn_benchmark, process-wide as in PyTorch
// (torch.set_float32_matmul_precision, torch.backends.cudnn.benchmark).
void SetMathModes(const std::string& matmul_precision, bool cudnn_benchmark);

}  // namespace kiln
