// NCCL is in LibTorch's CUDA library, which kiln_engine does not link: libkiln_cuda (the module
// kiln_engine loads where a GPU can be used; lib/trainer/internal/cuda_module.h) makes the NCCL
// backend of a process group, and sets the maker here as it loads.
#pragma once

#include <chrono>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace kiln::distributed {

using NcclBackendMaker =
    c10::intrusive_ptr<c10d::Backend> (*)(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int world_size, std::chrono::milliseconds timeout);

// Null until libkiln_cuda is loaded.
NcclBackendMaker GetNcclBackendMaker();
void SetNcclBackendMaker(NcclBackendMaker maker);

// libkiln_cuda's maker: a c10d::ProcessGroupNCCL with `timeout` on every collective.
c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size,
                                                  std::chrono::milliseconds timeout);

}  // namespace kiln::distributed
