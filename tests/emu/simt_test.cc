// The SIMT model of the CUDA emulation (cuda_emu/simt.cc) against what CUDA specifies: block
// barriers, warp shuffles and votes with their widths and exited lanes, dynamic shared memory,
// launch-configuration errors, faults (divergent barrier, deadlock, host pointer argument)
// reported as sticky errors instead of hangs, and the reverse thread order exposing a missing
// __syncthreads. Test kernels are CUDA C++ compiled with the emulation's prelude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/launch.cuh"
#include "simt_exec.h"
#include "stream_gate.h"

namespace {

// --- device buffers ----------------------------------------------------------------------------
template <class T>
struct Buf {
  T* p = nullptr;
  size_t n;
  explicit Buf(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * n), cudaSuccess);
  }
  explicit Buf(const std::vector<T>& h) : Buf(h.size()) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), sizeof(T) * n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Buf() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// Runs `body` in both thread orders.
template <class F>
void both_orders(F body) {
  for (auto o : {vt_emu::ThreadOrder::kForward, vt_emu::ThreadOrder::kReverse}) {
    vt_emu::set_thread_order(o);
    SCOPED_TRACE(o == vt_emu::ThreadOrder::kForward ? "forward order" : "reverse order");
    body();
  }
  vt_emu::set_thread_order(vt_emu::ThreadOrder::kForward);
}

// Expects the next synchronization to report `err` with a message containing `text`, then
// clears the device's sticky error (cudaDeviceReset frees every device allocation: buffers of
// the faulting test must be gone by then).
void expect_fault(cudaError_t err, const std::string& text) {
  const cudaError_t got = cudaDeviceSynchronize();
  EXPECT_EQ(got, err) << cudaGetErrorName(got);
  EXPECT_NE(std::string(cudaGetErrorString(got)).find(text), std::string::npos)
      << cudaGetErrorString(got);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(new float*), 4), err) << "the error is sticky";
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// --- kernels ------------------------------------------------------------------------------------
// Block sum through warp shuffles and a shared array, as kernels/block_reduce.cuh does.
__global__ void block_sum_kernel(const float* x, float* out) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nwarps ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) out[blockIdx.x] = t;
  }
}

// Each thread writes its slot and reads its neighbour's; mode 1 puts a barrier in between,
// mode 2 only fills the slots with -1 (static shared memory keeps what the previous block left,
// as on a GPU, so the tests set it first).
__global__ void neighbour_kernel(int* out, int mode) {
  __shared__ int slots[256];
  if (mode == 2) {
    slots[threadIdx.x] = -1;
    return;
  }
  slots[threadIdx.x] = int(threadIdx.x) + 1;
  if (mode == 1) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

__global__ void shuffle_kernel(int* out, int width) {
  const int lane = threadIdx.x & 31;
  const int v = 100 + int(threadIdx.x);
  int* o = out + threadIdx.x * 5;
  o[0] = __shfl_sync(0xffffffffu, v, 3, width);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2, width);
  o[2] = __shfl_down_sync(0xffffffffu, v, 2, width);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 5, width);
  o[4] = int(__ballot_sync(0xffffffffu, lane % 3 == 0));
}

// Lanes >= 8 of each warp leave; the rest vote over a full mask.
__global__ void exited_lanes_kernel(unsigned* out) {
  if ((threadIdx.x & 31) >= 8) return;
  const unsigned b = __ballot_sync(0xffffffffu, 1);
  if ((threadIdx.x & 31) == 0) out[threadIdx.x >> 5] = b;
}

__global__ void count_kernel(int* out) {
  const int n = __syncthreads_count(threadIdx.x % 4 == 0);
  const int all = __syncthreads_and(threadIdx.x < 1000);
  const int any = __syncthreads_or(threadIdx.x == 7);
  if (threadIdx.x == 0) {
    out[0] = n;
    out[1] = all;
    out[2] = any;
  }
}

__global__ void dynamic_smem_kernel(float* out, int n) {
  VT_DYNAMIC_SHARED(float, buf);
  out[threadIdx.x] = buf[threadIdx.x];  // never written: the emulation's fill (NaN)
  __syncthreads();
  buf[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[n + threadIdx.x] = buf[n - 1 - threadIdx.x];
}

__global__ void divergent_barrier_kernel(float* x) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  x[threadIdx.x] = 1.0f;
}

__global__ void deadlock_kernel(float* x) {
  if (threadIdx.x == 31) {
    __syncthreads();  // lane 31 waits for the block, the others for lane 31's shuffle
    return;
  }
  float v = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
  __syncthreads();
  x[threadIdx.x] = v;
}

__global__ void atomic_count_kernel(int* count) { atomicAdd(count, 1); }

__global__ void write_kernel(float* x) { x[threadIdx.x] = 2.0f; }

// --- tests -----------------------------------------------------------------------------------------
TEST(EmuSimt, BlockSumMatchesSerial) {
  both_orders([] {
    for (int threads : {32, 64, 256, 1024}) {
      const int blocks = 3;
      std::vector<float> x(size_t(threads * blocks));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 7) - 3);
      Buf<float> dx(x), dout(static_cast<size_t>(blocks));
      VT_LAUNCH(block_sum_kernel, blocks, threads, 0, nullptr, dx.p, dout.p);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      const auto out = dout.get();
      for (int b = 0; b < blocks; ++b) {
        float want = 0;
        for (int t = 0; t < threads; ++t) want += x[size_t(b * threads + t)];
        EXPECT_EQ(out[size_t(b)], want) << threads << " threads, block " << b;
      }
    }
  });
}

TEST(EmuSimt, ReverseOrderExposesAMissingSyncthreads) {
  const int n = 64;
  std::vector<int> want(n);
  for (int t = 0; t < n; ++t) want[size_t(t)] = (t + 1) % n + 1;
  std::vector<std::vector<int>> unsynced;
  both_orders([&] {
    Buf<int> out(n);
    VT_LAUNCH(neighbour_kernel, 1, n, 0, nullptr, out.p, 2);
    VT_LAUNCH(neighbour_kernel, 1, n, 0, nullptr, out.p, 1);
    EXPECT_EQ(out.get(), want) << "with __syncthreads every order is right";
    VT_LAUNCH(neighbour_kernel, 1, n, 0, nullptr, out.p, 2);
    VT_LAUNCH(neighbour_kernel, 1, n, 0, nullptr, out.p, 0);
    unsynced.push_back(out.get());
  });
  // Without the barrier, one of the two orders reads slots its neighbour has not written yet.
  EXPECT_TRUE(unsynced[0] != want || unsynced[1] != want);
  EXPECT_NE(unsynced[0], unsynced[1]);
}

TEST(EmuSimt, ShufflesAndBallotFollowTheProgrammingGuide) {
  for (int width : {32, 16, 8}) {
    const int n = 64;
    Buf<int> out(size_t(n) * 5);
    VT_LAUNCH(shuffle_kernel, 1, n, 0, nullptr, out.p, width);
    const auto o = out.get();
    for (int t = 0; t < n; ++t) {
      const int lane = t & 31, seg = lane / width * width, base = t - lane;
      const int v = 100 + t;
      SCOPED_TRACE(::testing::Message() << "thread " << t << " width " << width);
      EXPECT_EQ(o[size_t(t) * 5 + 0], 100 + base + seg + 3);
      EXPECT_EQ(o[size_t(t) * 5 + 1], lane - 2 >= seg ? v - 2 : v);
      EXPECT_EQ(o[size_t(t) * 5 + 2], lane + 2 < seg + width ? v + 2 : v);
      const int x = lane ^ 5;
      EXPECT_EQ(o[size_t(t) * 5 + 3], x < seg + width ? 100 + base + x : v);
      unsigned ballot = 0;
      for (int l = 0; l < 32; ++l)
        if (l % 3 == 0) ballot |= 1u << l;
      EXPECT_EQ(unsigned(o[size_t(t) * 5 + 4]), ballot);
    }
  }
}

TEST(EmuSimt, ExitedLanesLeaveTheMask) {
  both_orders([] {
    Buf<unsigned> out(3);
    VT_LAUNCH(exited_lanes_kernel, 1, 96, 0, nullptr, out.p);
    EXPECT_EQ(out.get(), (std::vector<unsigned>{0xffu, 0xffu, 0xffu}));
  });
}

TEST(EmuSimt, CountingBarriers) {
  Buf<int> out(3);
  VT_LAUNCH(count_kernel, 1, 256, 0, nullptr, out.p);
  EXPECT_EQ(out.get(), (std::vector<int>{64, 1, 1}));
}

TEST(EmuSimt, DynamicSharedMemoryStartsPoisoned) {
  const int n = 128;
  Buf<float> out(size_t(2 * n));
  VT_LAUNCH(dynamic_smem_kernel, 1, n, n * sizeof(float), nullptr, out.p, n);
  const auto o = out.get();
  for (int t = 0; t < n; ++t) {
    EXPECT_TRUE(std::isnan(o[size_t(t)])) << t;
    EXPECT_EQ(o[size_t(n + t)], float(n - 1 - t));
  }
}

TEST(EmuSimt, LaunchConfigurationErrors) {
  Buf<float> x(2048);
  VT_LAUNCH(write_kernel, 1, 1025, 0, nullptr, x.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error is not sticky";
  VT_LAUNCH(write_kernel, dim3(1, 70000), 32, 0, nullptr, x.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // Dynamic shared memory above 48 KiB needs the function attribute, up to the opt-in limit.
  VT_LAUNCH(dynamic_smem_kernel, 1, 32, 64 * 1024, nullptr, x.p, 32);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 300 * 1024),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 64 * 1024),
            cudaSuccess);
  VT_LAUNCH(dynamic_smem_kernel, 1, 32, 64 * 1024, nullptr, x.p, 32);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(EmuSimt, DivergentBarrierIsAStickyErrorNotAHang) {
  both_orders([] {
    // Hold the stream so that the kernel cannot have run (and faulted) before the host asks:
    // the launch itself is fine, the fault is asynchronous. The gate outlives the stream's wait
    // (Buf's cudaFree synchronizes the device).
    StreamGate gate;
    {
      Buf<float> x(64);
      ASSERT_EQ(cudaLaunchHostFunc(nullptr, StreamGate::wait, &gate), cudaSuccess);
      VT_LAUNCH(divergent_barrier_kernel, 2, 64, 0, nullptr, x.p);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the launch itself is fine";
      gate.release();
    }
    expect_fault(cudaErrorLaunchFailure, "divergent barrier");
  });
}

TEST(EmuSimt, DeadlockIsReportedWithWhereEachThreadWaits) {
  {
    Buf<float> x(64);
    VT_LAUNCH(deadlock_kernel, 1, 64, 0, nullptr, x.p);
  }
  expect_fault(cudaErrorLaunchFailure, "deadlock");
}

TEST(EmuSimt, HostPointerArgumentIsAnIllegalAddress) {
  std::vector<float> host(32);
  VT_LAUNCH(write_kernel, 1, 32, 0, nullptr, host.data());
  expect_fault(cudaErrorIllegalAddress, "pageable host memory");
}

TEST(EmuSimt, BlocksOnSeveralWorkersAgree) {
  vt_emu::set_block_workers(2);
  Buf<int> count(1);
  ASSERT_EQ(cudaMemset(count.p, 0, sizeof(int)), cudaSuccess);
  VT_LAUNCH(atomic_count_kernel, 97, 128, 0, nullptr, count.p);
  EXPECT_EQ(count.get()[0], 97 * 128);
  std::vector<float> x(32 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 11);
  Buf<float> dx(x), out(40);
  VT_LAUNCH(block_sum_kernel, 40, 32, 0, nullptr, dx.p, out.p);
  const auto o = out.get();
  for (int b = 0; b < 40; ++b) {
    float want = 0;
    for (int t = 0; t < 32; ++t) want += x[size_t(b * 32 + t)];
    EXPECT_EQ(o[size_t(b)], want);
  }
  vt_emu::set_block_workers(1);
}

}  // namespace
