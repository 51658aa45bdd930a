// Stream capture and CUDA graphs in the emulated runtime (cuda_emu/runtime_graphs.cc) against
// what CUDA documents: captured work does not run until the graph is launched; a replay equals
// the eager run bit for bit (kernels, memsets, device and pinned copies, cuBLASLt, fork/join over
// a second stream); kernel arguments and cuBLASLt's host alpha are taken at capture; pinned host
// memory is read at replay; what a GPU refuses during capture (synchronizing the stream,
// synchronous copies, cudaMalloc, pageable copies, unjoined forks, waits on outside events,
// frees of outside memory) is refused and invalidates the capture.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/launch.cuh"

namespace {

__global__ void axpb_kernel(float* y, const float* x, float a, float b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

// y[i] += scale[0] * x[i]: the scalar read from memory at run time.
__global__ void add_scaled_kernel(float* y, const float* x, const float* scale, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += scale[0] * x[i];
}

__global__ void square_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * x[i] + 0.25f;
}

std::vector<float> read(const float* d, int n) {
  std::vector<float> h(size_t(n), 0.0f);
  EXPECT_EQ(cudaMemcpy(h.data(), d, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return h;
}

void write(float* d, const std::vector<float>& h) {
  ASSERT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
}

float* dalloc(int n) {
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), size_t(n) * sizeof(float)), cudaSuccess);
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A sequence of stream work: two kernels, a memset, a device copy, a cuBLASLt matmul
// (D = x^T-ish product of an 8x8 and 8x8 tile) on `s`; `side` forks and joins through events.
struct Work {
  static constexpr int n = 64;
  float *x, *y, *z, *m;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t lay = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;

  Work() {
    x = dalloc(n);
    y = dalloc(n);
    z = dalloc(n);
    m = dalloc(n);
    EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lay, CUDA_R_32F, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
    EXPECT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  }
  ~Work() {
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cublasLtMatrixLayoutDestroy(lay);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    for (float* p : {x, y, z, m}) cudaFree(p);
  }
  void reset() {
    std::vector<float> h(n);
    for (int i = 0; i < n; ++i) h[size_t(i)] = 0.1f * float(i) - 1.7f;
    write(x, h);
    write(y, std::vector<float>(n, 0.0f));
    write(z, std::vector<float>(n, 0.0f));
    write(m, std::vector<float>(n, 0.0f));
  }
  void issue(cudaStream_t s, cudaStream_t side, float a) {
    VT_LAUNCH(axpb_kernel, 1, n, 0, s, y, x, a, 0.5f, n);
    ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(z, y, n * sizeof(float), cudaMemcpyDeviceToDevice, side),
              cudaSuccess);
    VT_LAUNCH(square_kernel, 1, n, 0, side, z, n);
    ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(m, 0, n * sizeof(float), s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
    const float alpha = 1.0f, beta = 0.0f;
    ASSERT_EQ(cublasLtMatmul(lt, op, &alpha, y, lay, z, lay, &beta, m, lay, m, lay, nullptr,
                             nullptr, 0, s),
              CUBLAS_STATUS_SUCCESS);
    VT_LAUNCH(add_scaled_kernel, 1, n, 0, s, x, m, z, n);  // x changes: the next replay differs
  }
};

TEST(EmuGraph, CapturedWorkRunsOnlyAtLaunchAndReplayEqualsEagerBitForBit) {
  cudaStream_t s, side;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  Work w;

  // Eager: three rounds, each reading what the previous one left in x.
  w.reset();
  std::vector<std::vector<float>> eager;
  for (int r = 0; r < 3; ++r) {
    w.issue(s, side, 1.25f);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    eager.push_back(read(w.x, Work::n));
    eager.push_back(read(w.m, Work::n));
  }

  w.reset();
  const std::vector<float> before = read(w.x, Work::n);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  w.issue(s, side, 1.25f);
  ASSERT_EQ(cudaStreamIsCapturing(side, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive) << "side joined the capture at the fork";
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  ASSERT_EQ(cudaStreamIsCapturing(side, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(same_bits(read(w.x, Work::n), before)) << "captured work must not run";

  cudaGraphExec_t x = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(cudaGraphLaunch(x, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(same_bits(read(w.x, Work::n), eager[size_t(2 * r)])) << "replay " << r;
    EXPECT_TRUE(same_bits(read(w.m, Work::n), eager[size_t(2 * r + 1)])) << "replay " << r;
  }
  EXPECT_NE(eager[0], eager[2]) << "the rounds must differ for the comparison to mean anything";
  EXPECT_EQ(cudaGraphExecDestroy(x), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(x, s), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaStreamDestroy(side);
  cudaStreamDestroy(s);
}

TEST(EmuGraph, ArgumentsAreTakenAtCaptureAndPinnedMemoryIsReadAtReplay) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  constexpr int n = 32;
  float* y = dalloc(n);
  float* x = dalloc(n);
  float* scale = dalloc(1);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(float)), cudaSuccess);
  write(x, std::vector<float>(n, 2.0f));
  write(y, std::vector<float>(n, 0.0f));

  float a = 3.0f;  // a kernel argument: a graph keeps the value it had at capture
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  VT_LAUNCH(axpb_kernel, 1, n, 0, s, y, x, a, 0.0f, n);
  ASSERT_EQ(cudaMemcpyAsync(scale, pinned, sizeof(float), cudaMemcpyHostToDevice, s),
            cudaSuccess);
  VT_LAUNCH(add_scaled_kernel, 1, n, 0, s, y, x, scale, n);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t ex;
  ASSERT_EQ(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
  a = 100.0f;  // changing the host variable after capture changes nothing

  *pinned = 0.5f;  // a value passed through pinned memory is read when the copy runs
  ASSERT_EQ(cudaGraphLaunch(ex, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(read(y, n)[7], 3.0f * 2.0f + 0.5f * 2.0f);
  *pinned = -4.0f;
  ASSERT_EQ(cudaGraphLaunch(ex, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(read(y, n)[7], 3.0f * 2.0f - 4.0f * 2.0f);
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  cudaFreeHost(pinned);
  for (float* p : {x, y, scale}) cudaFree(p);
  cudaStreamDestroy(s);
}

TEST(EmuGraph, CuBlasLtAlphaIsTakenAtCapture) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float *a = dalloc(4), *b = dalloc(4), *d = dalloc(4);
  write(a, {1, 2, 3, 4});
  write(b, {1, 0, 0, 1});  // identity: D = alpha * A
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lay, CUDA_R_32F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
  float alpha = 2.0f, beta = 0.0f;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cublasLtMatmul(lt, op, &alpha, a, lay, b, lay, &beta, d, lay, d, lay, nullptr, nullptr,
                           0, s),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  alpha = 7.0f;
  cudaGraphExec_t ex;
  ASSERT_EQ(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ex, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(read(d, 4), (std::vector<float>{2, 4, 6, 8}));
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(g);
  cublasLtMatrixLayoutDestroy(lay);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  for (float* p : {a, b, d}) cudaFree(p);
  cudaStreamDestroy(s);
}

// Begins a capture on s, runs `bad` (which must return `want`), and checks that the capture
// ends invalidated with no graph.
template <class F>
void expect_refused(cudaStream_t s, cudaError_t want, F bad) {
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(bad(), want) << cudaGetErrorString(want);
  cudaGetLastError();
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  cudaGetLastError();
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone) << "the capture is over after its failed end";
}

TEST(EmuGraph, SynchronousCallsDuringCaptureAreRefusedAndInvalidateIt) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* d = dalloc(16);
  std::vector<float> host(16, 1.0f);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16 * sizeof(float)), cudaSuccess);

  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] { return cudaStreamSynchronize(s); });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] { return cudaStreamQuery(s); });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] { return cudaDeviceSynchronize(); });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] {
    return cudaMemcpy(host.data(), d, 16 * sizeof(float), cudaMemcpyDeviceToHost);
  });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] {
    void* p;
    return cudaMalloc(&p, 64);
  });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] {
    // Host reads need the data on the host: a copy to pageable memory waits, so it is refused.
    return cudaMemcpyAsync(host.data(), d, 16 * sizeof(float), cudaMemcpyDeviceToHost, s);
  });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] {
    return cudaMemcpyAsync(d, host.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, s);
  });
  expect_refused(s, cudaErrorStreamCaptureUnsupported, [&] {
    return cudaFreeAsync(d, s);  // allocated outside the capture: a replay would free it again
  });
  // A wait on an event recorded outside the capture.
  cudaEvent_t outside;
  ASSERT_EQ(cudaEventCreate(&outside), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(outside, s), cudaSuccess);
  expect_refused(s, cudaErrorStreamCaptureIsolation,
                 [&] { return cudaStreamWaitEvent(s, outside, 0); });
  // A pinned copy is fine, and the stream works normally again afterwards.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(pinned, d, 16 * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  cudaGraph_t g;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  cudaEventDestroy(outside);
  cudaFreeHost(pinned);
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST(EmuGraph, RelaxedModeAllowsAllocationAndLaunchesReportTheInvalidation) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess) << "relaxed mode permits unsafe calls";
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  float* d = static_cast<float*>(p);
  VT_LAUNCH(square_kernel, 1, 16, 0, s, d, 16);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureInvalidated)
      << "work queued on an invalidated capture reports it";
  cudaGraph_t g;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  cudaFree(p);
  cudaStreamDestroy(s);
}

TEST(EmuGraph, UnjoinedForkIsRefusedAtTheEnd) {
  cudaStream_t s, side;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  float* d = dalloc(16);
  cudaEvent_t fork;
  ASSERT_EQ(cudaEventCreate(&fork), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  VT_LAUNCH(square_kernel, 1, 16, 0, side, d, 16);
  cudaGraph_t g;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  cudaGetLastError();
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(side, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  cudaEventDestroy(fork);
  cudaFree(d);
  cudaStreamDestroy(side);
  cudaStreamDestroy(s);
}

TEST(EmuGraph, StreamOrderedAllocationInsideTheCaptureBelongsToTheGraph) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  constexpr int n = 16;
  float* out = dalloc(n);
  float* x = dalloc(n);
  write(x, std::vector<float>(n, 3.0f));
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  float* tmp = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&tmp), n * sizeof(float), s), cudaSuccess);
  VT_LAUNCH(axpb_kernel, 1, n, 0, s, tmp, x, 2.0f, 1.0f, n);
  VT_LAUNCH(square_kernel, 1, n, 0, s, tmp, n);
  ASSERT_EQ(cudaMemcpyAsync(out, tmp, n * sizeof(float), cudaMemcpyDeviceToDevice, s),
            cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(tmp, s), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t ex;
  ASSERT_EQ(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(g), cudaSuccess);  // the instantiation keeps what it needs
  for (int r = 0; r < 2; ++r) {
    write(out, std::vector<float>(n, 0.0f));
    ASSERT_EQ(cudaGraphLaunch(ex, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(read(out, n)[3], 7.0f * 7.0f + 0.25f);
  }
  ASSERT_EQ(cudaGraphExecDestroy(ex), cudaSuccess);
  cudaFree(out);
  cudaFree(x);
  cudaStreamDestroy(s);
}

TEST(EmuGraph, AnAllocationThatOutlivesTheCaptureIsRefused) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  float* kept = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&kept), 64, s), cudaSuccess);
  VT_LAUNCH(square_kernel, 1, 16, 0, s, kept, 16);
  cudaGraph_t g;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  const std::string why = cudaGetErrorString(cudaErrorStreamCaptureInvalidated);
  EXPECT_NE(why.find("not freed in it"), std::string::npos) << why;
  cudaGetLastError();
  cudaStreamDestroy(s);
}

}  // namespace
