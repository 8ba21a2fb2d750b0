// kiln's CUDA module (lib/trainer/internal/cuda_module.h): loaded where CUDA's driver is and
// nowhere else, so a process on a machine without a GPU maps none of LibTorch's CUDA libraries;
// loaded on demand (KILN_LOAD_CUDA=1), it gives LibTorch its CUDA and registers kiln's CUDA parts.
#include "lib/trainer/internal/cuda_module.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "lib/distributed/internal/nccl_backend.h"
#include "tests/support/process.h"

namespace kiln {
namespace cuda_module_test {

bool Mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/" + library) != std::string::npos) return true;
  }
  return false;
}

bool ForcedChild() {
  const char* setting = std::getenv("KILN_LOAD_CUDA");
  return setting != nullptr && std::string(setting) == "1";
}

TEST(CudaModule, LoadedWhereCudasDriverIsAndNowhereElse) {
  if (std::getenv("KILN_LOAD_CUDA") != nullptr) GTEST_SKIP() << "KILN_LOAD_CUDA is set";
  const bool driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr;
  if (CudaModuleNote() == "this kiln was built without CUDA") {
    EXPECT_FALSE(CudaModuleLoaded());
  } else {
    EXPECT_EQ(CudaModuleLoaded(), driver) << CudaModuleNote();
  }
  if (!driver) {
    EXPECT_FALSE(CudaModuleLoaded());
    EXPECT_EQ(CudaModuleNote(), "no CUDA driver (libcuda.so.1) on this machine");
    EXPECT_EQ(NoCudaDeviceAvailable(),
              "no CUDA device is available: no CUDA driver (libcuda.so.1) on this machine");
    EXPECT_FALSE(torch::cuda::is_available());
  }
  // What the module saves: without it, no LibTorch CUDA library is in this process.
  EXPECT_EQ(Mapped("libtorch_cuda.so"), CudaModuleLoaded());
  EXPECT_EQ(Mapped("libkiln_cuda.so"), CudaModuleLoaded());
  EXPECT_EQ(GetCudaModuleHooks() != nullptr, CudaModuleLoaded());
  EXPECT_EQ(distributed::GetNcclBackendMaker() != nullptr, CudaModuleLoaded());
}

// This test runs itself again with KILN_LOAD_CUDA=1, where the child checks the loaded module.
TEST(CudaModule, LoadedOnDemandGivesLibTorchItsCudaAndRegistersKilnsParts) {
  if (!ForcedChild()) {
    if (CudaModuleNote() == "this kiln was built without CUDA") {
      GTEST_SKIP() << "this kiln was built without CUDA";
    }
    auto child = testing::RunProcess(
        {"/proc/self/exe",
         "--gtest_filter=CudaModule.LoadedOnDemandGivesLibTorchItsCudaAndRegistersKilnsParts"},
        {{"KILN_LOAD_CUDA", "1"}});
    EXPECT_EQ(child.exit_code, 0) << child.out << child.err;
    EXPECT_NE(child.out.find("[  PASSED  ] 1 test"), std::string::npos) << child.out;
    return;
  }
  ASSERT_TRUE(CudaModuleLoaded()) << CudaModuleNote();
  EXPECT_EQ(CudaModuleNote(), "");
  EXPECT_EQ(NoCudaDeviceAvailable(), "no CUDA device is available");
  EXPECT_TRUE(Mapped("libtorch_cuda.so"));
  EXPECT_TRUE(Mapped("libkiln_cuda.so"));
  ASSERT_NE(GetCudaModuleHooks(), nullptr);
  EXPECT_NE(distributed::GetNcclBackendMaker(), nullptr);
  // LibTorch's CUDA hooks are the real ones: without libtorch_cuda they throw here.
  EXPECT_GT(at::detail::getCUDAHooks().versionCuDNN(), 0);
  // LibTorch with its CUDA loaded still computes on the CPU.
  auto x = torch::arange(6, torch::kFloat).reshape({2, 3});
  EXPECT_EQ(x.sum().item<float>(), 15.0f);
}

}  // namespace cuda_module_test
}  // namespace kiln
