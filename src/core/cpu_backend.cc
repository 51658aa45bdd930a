// The CPU backend (the reference every other backend is tested against) and the device
// emulator: the Backend runtime over host memory (allocation, accounting, copies). Every op
// computes on the host for both in its op family's file (core/ops/*.cc, with the fp32 kernels of
// cpu_kernels.h through core/ops/host_window.h). The emulator differs from the CPU backend only
// in that its tensors are tagged Device::kCUDA: host code cannot touch them and every transfer
// is an explicit copy, exactly as with a real GPU. Also the registry of backends by device.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/check.h"

#if VTRAIN_HAS_CUDA
#include "kernels/cuda_check.cuh"
#endif

namespace vt {

namespace {

// Host memory, 64-byte aligned, with the accounting of bytes_in_use / peak_bytes.
class HostBackend : public Backend {
 public:
  explicit HostBackend(const char* name) : name_(name) {}
  const char* name() const override { return name_; }

  void* alloc(size_t bytes) override {
    const size_t a = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, a);
    VT_CHECK_MSG(p != nullptr, name_ << ": out of memory allocating " << bytes << " bytes");
    std::memset(p, 0, a);
    std::lock_guard<std::mutex> lock(mu_);
    sizes_.push_back({p, a});
    in_use_ += a;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = sizes_.size(); i-- > 0;)
        if (sizes_[i].first == p) {
          in_use_ -= sizes_[i].second;
          sizes_[i] = sizes_.back();
          sizes_.pop_back();
          break;
        }
    }
    std::free(p);
  }
  void fill_zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy_bytes(void* dst, const void* src, size_t bytes, CopyKind) override {
    std::memmove(dst, src, bytes);
  }
  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               size_t rows) override {
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch,
                  static_cast<const char*>(src) + r * spitch, width);
  }
  void synchronize() override {}
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }
  void reset_peak() override { peak_ = in_use_; }

 private:
  const char* name_;
  std::mutex mu_;
  std::vector<std::pair<void*, size_t>> sizes_;
  size_t in_use_ = 0, peak_ = 0;
};

HostBackend& cpu_backend() {
  static HostBackend* b = new HostBackend("cpu");
  return *b;
}

std::unique_ptr<Backend>& device_slot() {
  static std::unique_ptr<Backend> slot;
  return slot;
}

}  // namespace

Backend& backend(Device d) {
  if (d == Device::kCPU) return cpu_backend();
  VT_CHECK_MSG(device_slot() != nullptr,
               "no backend for the GPU: this process runs on the CPU (use --device cuda, or "
               "--device emulated for the device emulator)");
  return *device_slot();
}

bool has_backend(Device d) { return d == Device::kCPU || device_slot() != nullptr; }

void set_device_backend(std::unique_ptr<Backend> b) { device_slot() = std::move(b); }

std::unique_ptr<Backend> make_device_emulator() {
  return std::make_unique<HostBackend>("emulated");
}

int cuda_device_count_or_zero() {
#if VTRAIN_HAS_CUDA
  return cuda::cuda_device_count();
#else
  return 0;
#endif
}

#if !VTRAIN_HAS_CUDA
std::unique_ptr<Backend> make_cuda_backend() { return nullptr; }
std::vector<std::string> cuda_device_descriptions() { return {}; }
bool cuda_devices_are_emulated() { return false; }
int cuda_compute_capability() { return 0; }
#endif  // with CUDA: src/core/cuda_backend.cc

}  // namespace vt
