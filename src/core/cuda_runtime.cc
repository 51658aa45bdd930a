// The CUDA device runtime (core/cuda_runtime.h): device selection, the compute stream,
// stream-ordered memory, copies, the op adapters' shared scratch and caches, the CUDA-event
// profile clock and the device descriptions of `vtrain devices`.
#if VTRAIN_HAS_CUDA

#include "core/cuda_runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/process_device.h"
#include "kernels/cuda_check.cuh"
#include "kernels/reduce.cuh"
#include "kernels/rope.cuh"

namespace vt {

namespace {

// The device each runtime call runs on is made current on the calling thread once per thread
// (cudaSetDevice is per host thread). Only this runtime and NcclCommunicator set the device,
// and both pick the same one, so the cached value stays true.
thread_local int tl_current_device = -1;

// One process per GPU (core/process_device.h, the rule NcclCommunicator follows too).
int select_device() {
  const int count = cuda::cuda_device_count();
  VT_CHECK_MSG(count > 0,
               "the CUDA backend needs a CUDA device, and none is usable (no GPU or no driver); "
               "run with --device cpu, or --device emulated for the device emulator");
  return process_device_index(count);
}

}  // namespace

CudaRuntime::CudaRuntime() {
  device_ = select_device();
  VT_CUDA_CHECK(cudaSetDevice(device_));
  tl_current_device = device_;
  int pools = 0;
  VT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
  VT_CHECK_MSG(pools != 0, "the CUDA backend needs stream-ordered allocation (memory pools), "
                           "which device " << device_ << " does not support");
  VT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
  // Keep freed blocks in the pool (the default threshold 0 returns them to the driver at every
  // synchronization, making the next cudaMallocAsync an expensive driver call).
  cudaMemPool_t pool = nullptr;
  VT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  VT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  gemm_ = std::make_unique<cuda::Gemm>();
  VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&reduce_scratch_),
                           sizeof(double) * (cuda::kReduceScratch + 1)));
  // The reductions' block counter starts at zero (kernels/reduce.cuh); each call leaves it so.
  VT_CUDA_CHECK(cudaMemset(reduce_scratch_, 0, sizeof(double) * (cuda::kReduceScratch + 1)));
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&reduce_host_), sizeof(double)));
}

CudaRuntime::~CudaRuntime() {
  cudaSetDevice(device_);
  if (attn_ws_) cudaFreeAsync(attn_ws_, stream_);
  for (auto& [key, t] : rope_tables_) cudaFreeAsync(t.p, stream_);
  cudaStreamSynchronize(stream_);
  gemm_.reset();
  cudaFree(reduce_scratch_);
  cudaFreeHost(reduce_host_);
  cudaStreamDestroy(stream_);
}

void CudaRuntime::on_device() const {
  if (tl_current_device != device_) {
    VT_CUDA_CHECK(cudaSetDevice(device_));
    tl_current_device = device_;
  }
}

// ---------------------------------------------------------------------------------------------
// Memory and transfers

void* CudaRuntime::allocate(size_t bytes, bool zero) {
  on_device();
  const size_t a = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, a, stream_);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    VT_CHECK_MSG(false, "cuda: out of device memory allocating "
                            << bytes << " bytes (" << bytes_in_use()
                            << " bytes in use by tensors, device " << free_b << " free of "
                            << total_b << ")");
  }
  VT_CUDA_CHECK(err);
  VT_CHECK_MSG(reinterpret_cast<uintptr_t>(p) % 64 == 0, "cuda: allocation not 64-byte aligned");
  if (zero) VT_CUDA_CHECK(cudaMemsetAsync(p, 0, a, stream_));
  std::lock_guard<std::mutex> lock(mem_mu_);
  sizes_[p] = a;
  in_use_ += a;
  peak_ = std::max(peak_, in_use_);
  return p;
}

int64_t CudaRuntime::available_bytes() const {
  on_device();
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return static_cast<int64_t>(free_b);
}

void CudaRuntime::release(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(mem_mu_);
    auto it = sizes_.find(p);
    VT_CHECK_MSG(it != sizes_.end(), "cuda: release of memory this backend did not allocate");
    in_use_ -= it->second;
    sizes_.erase(it);
  }
  on_device();
  // Stream-ordered: the block is reused only after everything queued before this point.
  const cudaError_t err = cudaFreeAsync(p, stream_);
  if (err != cudaErrorCudartUnloading) VT_CUDA_CHECK(err);
}

void CudaRuntime::fill_zero(void* p, size_t bytes) {
  if (bytes == 0) return;
  on_device();
  VT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
}

void CudaRuntime::copy_bytes(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  on_device();
  switch (kind) {
    case CopyKind::kHostToDevice:
      VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      VT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go on return
      break;
    case CopyKind::kDeviceToHost:
      VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
      VT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the data is there on return
      break;
    case CopyKind::kDeviceToDevice:
      VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
      break;
  }
}

void CudaRuntime::copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                          size_t rows) {
  if (width == 0 || rows == 0) return;
  on_device();
  VT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice,
                                  stream_));
}

void CudaRuntime::synchronize() {
  on_device();
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

size_t CudaRuntime::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mem_mu_);
  return in_use_;
}
size_t CudaRuntime::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mem_mu_);
  return peak_;
}
void CudaRuntime::reset_peak() {
  std::lock_guard<std::mutex> lock(mem_mu_);
  peak_ = in_use_;
}

// ---------------------------------------------------------------------------------------------
// Scratch and caches

double* CudaRuntime::reduction_result() { return reduce_scratch_ + cuda::kReduceScratch; }

double CudaRuntime::fetch_result(const double* out) {
  VT_CUDA_CHECK(cudaMemcpyAsync(reduce_host_, out, sizeof(double), cudaMemcpyDeviceToHost,
                                stream_));
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *reduce_host_;
}

void* CudaRuntime::attention_workspace(size_t bytes) {
  bytes = std::max<size_t>(bytes, 256);
  if (bytes > attn_ws_bytes_) {
    if (attn_ws_) VT_CUDA_CHECK(cudaFreeAsync(attn_ws_, stream_));
    attn_ws_ = nullptr;
    attn_ws_bytes_ = 0;
    VT_CUDA_CHECK(cudaMallocAsync(&attn_ws_, bytes, stream_));
    attn_ws_bytes_ = bytes;
  }
  return attn_ws_;
}

const float2* CudaRuntime::rope_table(int64_t hd, double base, int64_t positions) {
  std::lock_guard<std::mutex> lock(rope_mu_);
  RopeTable& t = rope_tables_[{hd, base}];
  if (positions > t.positions) {
    const int64_t grown = std::max<int64_t>({positions, 2 * t.positions, 64});
    float2* p = nullptr;
    VT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p),
                                  sizeof(float2) * size_t(grown) * size_t(hd / 2), stream_));
    cuda::rope_table(p, grown, hd, base, stream_);
    if (t.p) VT_CUDA_CHECK(cudaFreeAsync(t.p, stream_));
    t.p = p;
    t.positions = grown;
  }
  return t.p;
}

CudaAttentionKernels CudaRuntime::attention_kernels() const {
  int k = attention_kernels_.load();
  if (k < 0) {
    const char* env = std::getenv("VTRAIN_CUDA_ATTENTION");
    k = int(CudaAttentionKernels::kTensorCores);
    if (env && std::strcmp(env, "reference") == 0) {
      k = int(CudaAttentionKernels::kReference);
    } else {
      VT_CHECK_MSG(!env || !*env || std::strcmp(env, "tensor-cores") == 0,
                   "VTRAIN_CUDA_ATTENTION must be 'reference' or 'tensor-cores', got '" << env
                                                                                       << "'");
    }
    attention_kernels_ = k;
  }
  return CudaAttentionKernels(k);
}

// ---------------------------------------------------------------------------------------------
// Device descriptions and the profile clock

std::vector<std::string> cuda_device_descriptions() {
  std::vector<std::string> out;
  const int n = cuda::cuda_device_count();
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    char line[512];
    std::snprintf(line, sizeof line, "device %d: %s, %.1f GiB, compute capability %d.%d, %d SMs",
                  d, prop.name, double(prop.totalGlobalMem) / double(1ull << 30), prop.major,
                  prop.minor, prop.multiProcessorCount);
    out.push_back(line);
  }
  return out;
}

int cuda_compute_capability() {
  if (cuda::cuda_device_count() <= 0) return 0;
  int d = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&d) != cudaSuccess || cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return prop.major * 10 + prop.minor;
}

bool cuda_devices_are_emulated() {
  if (cuda::cuda_device_count() <= 0) return false;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  // cuda_emu/runtime_launch.cc names its devices "vtrain CUDA emulation (...)".
  return std::strncmp(prop.name, "vtrain CUDA emulation", 21) == 0;
}

namespace {

// CUDA events on one stream, a pool reused after each recycle().
class CudaEventClock final : public op_profile::DeviceClock {
 public:
  explicit CudaEventClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  int mark() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      VT_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    VT_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return static_cast<int>(used_++);
  }
  double seconds_between(int a, int b) override {
    std::lock_guard<std::mutex> lock(mu_);
    VT_CUDA_CHECK(cudaEventSynchronize(events_[b]));
    float ms = 0;
    VT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[a], events_[b]));
    return double(ms) * 1e-3;
  }
  void recycle() override {
    std::lock_guard<std::mutex> lock(mu_);
    used_ = 0;
  }
  const char* name() const override { return "CUDA events"; }

 private:
  cudaStream_t stream_;
  std::mutex mu_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<op_profile::DeviceClock> make_cuda_event_clock(cudaStream_t stream) {
  return std::make_unique<CudaEventClock>(stream);
}

}  // namespace vt

#endif  // VTRAIN_HAS_CUDA
