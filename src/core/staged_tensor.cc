// StagedTensor (see staged_tensor.h): pinned mirror and async copies on a CUDA device, plain
// memory and immediate copies elsewhere.
#include "core/staged_tensor.h"

#include <cstring>
#include <new>
#include <utility>

#include "core/backend.h"
#include "core/check.h"
#if VTRAIN_HAS_CUDA
#include "core/cuda_runtime.h"
#include "kernels/cuda_check.cuh"
#endif

namespace vt {

namespace {
#if VTRAIN_HAS_CUDA
CudaRuntime* cuda_of(Device d) { return d == Device::kCPU ? nullptr : backend(d).cuda(); }
#endif
}  // namespace

StagedTensor::StagedTensor(int64_t n, DType dtype, Device device)
    : device_(Tensor::zeros({n}, dtype, device)) {
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = cuda_of(device)) {
    rt->on_device();
    VT_CUDA_CHECK(cudaMallocHost(&host_, bytes > 0 ? bytes : 1));
    pinned_ = true;
  }
#endif
  if (!pinned_) host_ = ::operator new(bytes > 0 ? bytes : 1, std::align_val_t{64});
  std::memset(host_, 0, bytes);
}

StagedTensor::~StagedTensor() { release(); }

void StagedTensor::release() {
  if (host_ == nullptr) return;
#if VTRAIN_HAS_CUDA
  if (pinned_) {
    wait();  // no copy of the mirror is pending when it goes
    (void)cudaFreeHost(host_);
    host_ = nullptr;
    return;
  }
#endif
  ::operator delete(host_, std::align_val_t{64});
  host_ = nullptr;
}

StagedTensor::StagedTensor(StagedTensor&& o) noexcept
    : device_(std::move(o.device_)), host_(std::exchange(o.host_, nullptr)), pinned_(o.pinned_) {}

StagedTensor& StagedTensor::operator=(StagedTensor&& o) noexcept {
  if (this != &o) {
    release();
    device_ = std::move(o.device_);
    host_ = std::exchange(o.host_, nullptr);
    pinned_ = o.pinned_;
  }
  return *this;
}

Tensor StagedTensor::host_view() const {
  return Tensor::view(host_, {numel()}, device_.dtype(), Device::kCPU);
}

void StagedTensor::upload(int64_t offset, int64_t count) const {
  if (count < 0) count = numel() - offset;
  VT_CHECK_MSG(offset >= 0 && offset + count <= numel(),
               "StagedTensor::upload: [" << offset << ", +" << count << ") outside " << numel());
  if (count == 0) return;
#if VTRAIN_HAS_CUDA
  if (pinned_) {
    CudaRuntime* rt = cuda_of(device_.device());
    rt->on_device();
    const size_t es = dtype_size(device_.dtype());
    VT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(device_.raw()) + offset * es,
                                  static_cast<const char*>(host_) + offset * es, count * es,
                                  cudaMemcpyHostToDevice, rt->stream()));
    return;
  }
#endif
  device_.flat(offset, count).copy_from(host_view().flat(offset, count));
}

void StagedTensor::download(int64_t offset, int64_t count) const {
  if (count < 0) count = numel() - offset;
  VT_CHECK_MSG(offset >= 0 && offset + count <= numel(),
               "StagedTensor::download: [" << offset << ", +" << count << ") outside "
                                           << numel());
  if (count == 0) return;
#if VTRAIN_HAS_CUDA
  if (pinned_) {
    CudaRuntime* rt = cuda_of(device_.device());
    rt->on_device();
    const size_t es = dtype_size(device_.dtype());
    VT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(host_) + offset * es,
                                  static_cast<const char*>(device_.raw()) + offset * es,
                                  count * es, cudaMemcpyDeviceToHost, rt->stream()));
    return;
  }
#endif
  host_view().flat(offset, count).copy_from(device_.flat(offset, count));
}

void StagedTensor::wait() const {
#if VTRAIN_HAS_CUDA
  if (pinned_) {
    CudaRuntime* rt = cuda_of(device_.device());
    rt->on_device();
    VT_CUDA_CHECK(cudaStreamSynchronize(rt->stream()));
  }
#endif
}

}  // namespace vt
