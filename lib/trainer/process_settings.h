// Everything kiln changes for the whole process rather than for one Trainer, in one place:
//   - the number of intra-op threads LibTorch uses (at::set_num_threads),
//   - glibc malloc keeping freed memory for reuse (mmap threshold 32 MiB, no trimming),
//   - handlers for SIGINT, SIGTERM and SIGUSR1 while a fit runs (a graceful stop).
// The Trainer applies them when it fits, evaluates or predicts; library users get them too, and
// a user's GLIBC_TUNABLES for malloc wins. docs/training.md ("Memory") says why.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kiln {

// Sets the thread count (`num_threads` <= 0: every core, shared among `local_workers` processes
// on this machine) and the allocator settings; returns the thread count.
int ConfigureProcess(int num_threads, int local_workers);
// The allocator settings alone: glibc malloc keeps freed memory for reuse (once per process).
void KeepFreedMemoryForReuse();

// " (MKL, AVX512 kernels)": LibTorch's BLAS (MKL in PyPI's wheel; OpenBLAS with the kernel set it
// picked, from OPENBLAS_CORETYPE or the CPU, in a build that uses it) and the CPU capability its
// own kernels dispatch to (ATen's, as torch.backends.cpu.get_cpu_capability()): for the training log.
std::string BlasKernelsNote();

// " (NVIDIA H100 80GB HBM3, compute capability 9.0, driver 13.0, CUDA 13.0, cuDNN 91900)" for a
// CUDA device of a build with CUDA; "" otherwise: for the training log.
std::string CudaDeviceNote(const c10::Device& device);

// Installs the stop handlers for its lifetime, then restores the previous ones. Received() is the
// signal that asked training to stop (SIGINT, SIGTERM, or SIGUSR1 — what SLURM sends before
// preempting a job), 0 while none did.
// OK while no stop signal has arrived (StopSignals installed); else Cancelled "stopped by SIGINT
// `doing`", carrying the exit code 128 + the signal (130 for SIGINT, 143 for SIGTERM): what a
// command that is not a fit (validate, test, predict, export, shard) checks between its steps.
absl::Status CheckStopSignal(const std::string& doing);

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int Received();

 private:
  struct Saved;
  Saved* saved_;
};

}  // namespace kiln
