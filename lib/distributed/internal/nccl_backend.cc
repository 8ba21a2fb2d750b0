// Part of libkiln_cuda (lib/CMakeLists.txt), which links LibTorch's CUDA libraries.
#include "lib/distributed/internal/nccl_backend.h"

// The wheel's libtorch_cuda holds ProcessGroupNCCL; its header declares it under USE_C10D_NCCL.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace kiln::distributed {

c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size,
                                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace kiln::distributed
