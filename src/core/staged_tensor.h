// StagedTensor: a tensor on a device with a host mirror of the same elements, for the small
// values that cross between the host and the device every step (the optimizer's per-step scalars,
// a graphed step's token ids and losses) without a synchronizing copy. upload() queues the
// mirror's elements to the device and download() the device's to the mirror, in stream order: on
// a CUDA device as cudaMemcpyAsync from pinned memory on the runtime's stream, so a stream
// capture records them and each replay copies what the mirror holds when it runs (the host
// writes the mirror before the launch, reads it after wait()). On the CPU and the device
// emulator the copies happen at the call. The host may write the mirror only while no queued
// upload of it is pending (after a wait(), or a synchronization of the stream).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace vt {

class StagedTensor {
 public:
  StagedTensor() = default;
  // n elements of dtype on `device`, both sides zeroed.
  StagedTensor(int64_t n, DType dtype, Device device);
  ~StagedTensor();
  StagedTensor(StagedTensor&& o) noexcept;
  StagedTensor& operator=(StagedTensor&& o) noexcept;
  StagedTensor(const StagedTensor&) = delete;
  StagedTensor& operator=(const StagedTensor&) = delete;

  bool defined() const { return device_.defined(); }
  int64_t numel() const { return device_.numel(); }
  const Tensor& device() const { return device_; }
  // The mirror: raw bytes, and as a host tensor (a view: valid while this object lives).
  void* host() const { return host_; }
  template <class T>
  T* host_as() const { return static_cast<T*>(host_); }
  Tensor host_view() const;

  // Elements [offset, offset + count) (count < 0: to the end), mirror -> device / device ->
  // mirror, queued on the device's stream.
  void upload(int64_t offset = 0, int64_t count = -1) const;
  void download(int64_t offset = 0, int64_t count = -1) const;
  // Waits until the device's queued work, these copies included, is done.
  void wait() const;

 private:
  void release();
  Tensor device_;
  void* host_ = nullptr;
  bool pinned_ = false;  // host_ from cudaMallocHost (a CUDA device), else operator new
};

}  // namespace vt
