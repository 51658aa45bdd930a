// cuda_device_count(): never fails, leaves no sticky CUDA error behind. Runs without a GPU too.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda_check.cuh"

namespace vt::cuda {
namespace {

TEST(GpuCudaCheck, DeviceCountIsNonNegativeAndLeavesNoError) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda_device_count(), n);  // stable across calls
  if (n > 0) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(GpuCudaCheck, GridForCoversSmallAndHugeSizes) {
  EXPECT_EQ(grid_for(0, 256), 1u);
  EXPECT_EQ(grid_for(1, 256), 1u);
  EXPECT_EQ(grid_for(257, 256), 2u);
  EXPECT_EQ(grid_for(int64_t(1) << 40, 256), 65535u * 16);
}

TEST(GpuCudaCheckDeathTest, CheckMacroNamesFileAndLine) {
  EXPECT_DEATH(VT_CUDA_CHECK(cudaErrorInvalidValue), "cuda_check_test.cc:[0-9]+: CUDA error");
}

}  // namespace
}  // namespace vt::cuda
