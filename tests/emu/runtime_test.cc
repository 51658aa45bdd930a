// The emulated CUDA runtime (cuda_emu/runtime_*.cc) against the CUDA runtime's documented
// semantics: asynchronous copies really are asynchronous (a stream is held back by a host
// function the test releases), pageable sources are staged, the legacy default stream waits for
// blocking streams and non-blocking streams do not, events order streams, copies check what
// their kind says, fresh memory is poisoned, allocation fails beyond the device's memory, and
// stream-ordered frees happen after the queued work.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/launch.cuh"
#include "stream_gate.h"

namespace {

__global__ void fill_kernel(float* x, float v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

TEST(EmuRuntime, AsyncCopyToPinnedMemoryReturnsBeforeItRuns) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float *d = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 64 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 64; ++i) pinned[i] = -1.0f;
  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(s, StreamGate::wait, &gate), cudaSuccess);
  VT_LAUNCH(fill_kernel, 1, 64, 0, s, d, 3.0f, 64);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(pinned[0], -1.0f) << "the copy must not have run yet";
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pinned[0], 3.0f);
  EXPECT_EQ(pinned[63], 3.0f);
  cudaFreeHost(pinned);
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST(EmuRuntime, PageableSourceIsStagedAndPageableDestinationWaits) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 16 * sizeof(float)), cudaSuccess);
  std::vector<float> src(16, 7.0f), dst(16, 0.0f);
  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(s, StreamGate::wait, &gate), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, src.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, s),
            cudaSuccess);
  std::fill(src.begin(), src.end(), -5.0f);  // allowed: the runtime took a staging copy
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.release();
  });
  // To pageable memory the call returns only when the data is there.
  ASSERT_EQ(cudaMemcpyAsync(dst.data(), d, 16 * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  EXPECT_EQ(dst[5], 7.0f);
  opener.join();
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST(EmuRuntime, LegacyStreamWaitsForBlockingStreamsOnly) {
  cudaStream_t blocking, nonblocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  {
    StreamGate gate;
    ASSERT_EQ(cudaLaunchHostFunc(nonblocking, StreamGate::wait, &gate), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(float), nullptr), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess) << "not held by a non-blocking stream";
    gate.release();
  }
  {
    StreamGate gate;
    ASSERT_EQ(cudaLaunchHostFunc(blocking, StreamGate::wait, &gate), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(float), nullptr), cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady) << "held by the blocking stream";
    gate.release();
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(d);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

TEST(EmuRuntime, EventsOrderStreams) {
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  float *d = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 32 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 32 * sizeof(float)), cudaSuccess);
  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(a, StreamGate::wait, &gate), cudaSuccess);
  VT_LAUNCH(fill_kernel, 1, 32, 0, a, d, 9.0f, 32);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 32 * sizeof(float), cudaMemcpyDeviceToHost, b),
            cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady) << "b waits for a's event";
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(pinned[31], 9.0f);
  cudaEventDestroy(e);
  cudaFreeHost(pinned);
  cudaFree(d);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST(EmuRuntime, CopiesCheckWhatTheirKindSays) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 8 * sizeof(float)), cudaSuccess);
  std::vector<float> h(16, 1.0f);
  // Host destination named as device memory.
  EXPECT_EQ(cudaMemcpy(h.data(), h.data() + 8, 8 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("not device memory"),
            std::string::npos);
  // Device source named as host memory.
  EXPECT_EQ(cudaMemcpy(d, d, 8 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  // Past the end of the allocation (256-byte rounded: 64 floats fit, 65 do not).
  EXPECT_EQ(cudaMemcpy(d, h.data(), 65 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("runs past the end"),
            std::string::npos);
  // cudaMemcpyDefault infers the direction.
  EXPECT_EQ(cudaMemcpy(d, h.data(), 8 * sizeof(float), cudaMemcpyDefault), cudaSuccess);
  std::vector<float> back(8, 0.0f);
  EXPECT_EQ(cudaMemcpy(back.data(), d, 8 * sizeof(float), cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back[3], 1.0f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
  // Freeing twice is an error, not a crash.
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST(EmuRuntime, FreshMemoryIsPoisonedAndTheDeviceHasAFiniteSize) {
  for (bool async : {false, true}) {
    float* d = nullptr;
    if (async)
      ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), 40 * sizeof(float), nullptr),
                cudaSuccess);
    else
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 40 * sizeof(float)), cudaSuccess);
    std::vector<float> h(40, 0.0f);
    ASSERT_EQ(cudaMemcpy(h.data(), d, 40 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    for (float v : h) EXPECT_TRUE(std::isnan(v)) << "unwritten device memory reads as NaN";
    ASSERT_EQ(cudaFreeAsync(d, nullptr), cudaSuccess);
  }
  size_t free_b = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total), cudaSuccess);
  EXPECT_LE(free_b, total);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_NE(std::string(prop.name).find("emulation"), std::string::npos) << prop.name;
  EXPECT_EQ(prop.totalGlobalMem, total);
}

TEST(EmuRuntime, StreamOrderedFreeWaitsForQueuedWork) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float *d = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), 16 * sizeof(float), s), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16 * sizeof(float)), cudaSuccess);
  StreamGate gate;
  ASSERT_EQ(cudaLaunchHostFunc(s, StreamGate::wait, &gate), cudaSuccess);
  VT_LAUNCH(fill_kernel, 1, 16, 0, s, d, 4.0f, 16);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 16 * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(d, s), cudaSuccess);  // the kernel and the copy still read it
  // A later use of the freed pointer is an error at once.
  EXPECT_EQ(cudaMemsetAsync(d, 0, 16 * sizeof(float), s), cudaErrorInvalidValue);
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pinned[15], 4.0f);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

}  // namespace
