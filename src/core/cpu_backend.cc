// The CPU backend (the reference every other backend is tested against) and the device
// emulator: host memory, and the ops that still have a Backend entry point (dense algebra,
// reductions), computed with the fp32 kernels of cpu_kernels.h through the windows of
// core/ops/host_window.h (bf16 widened to fp32, rounded back when written). The other op
// families compute on the host in their own files (core/ops/*.cc) for both. The emulator differs from the CPU
// backend only in that its tensors are tagged Device::kCUDA: host code cannot touch them and
// every transfer is an explicit copy, exactly as with a real GPU.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/bf16.h"
#include "core/cpu_kernels.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "kernels/cuda_check.cuh"
#endif

namespace vt {

namespace {

using host::F32;
using host::f32_of;
using host::ids_of;
using host::In;
using host::InOut;
using host::Out;

// A base tensor seen as an fp32 matrix from its offset, for the GEMM.
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

  void gemm(const GemmArgs& g) override {
    const bool bf = g.A.dtype() == DType::kBF16;
    VT_CHECK_MSG(bf == (g.B.dtype() == DType::kBF16), "gemm: A and B must have one dtype");
    VT_CHECK_MSG(bf || g.C.dtype() == DType::kF32, "gemm: f32 A/B need an f32 C");
    In a(g.A), b(g.B);
    InOut c(g.C);
    cpu::gemm<float>(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, a.p(), g.lda, b.p(), g.ldb,
                     g.beta, c.p(), g.ldc);
  }
  void cast(const Tensor& y, const Tensor& x) override {
    In xi(x);
    Out yo(y);
    std::copy(xi.p(), xi.p() + x.numel(), yo.p());
  }
  void axpy(const Tensor& y, const Tensor& x, float alpha) override {
    InOut yp(y);
    In xp(x);
    const int64_t n = y.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) yp.p()[i] += alpha * xp.p()[i];
  }
  void scale_copy(const Tensor& y, const Tensor& x, float alpha) override {
    In xp(x);
    std::vector<float> tmp(xp.p(), xp.p() + x.numel());  // y may alias x
    Out yp(y);
    const int64_t n = y.numel();
    for (int64_t i = 0; i < n; ++i) yp.p()[i] = alpha * tmp[i];
  }
  double dot(const Tensor& a, const Tensor& b) override {
    In ap(a), bp(b);
    double s = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(ap.p()[i]) * bp.p()[i];
    return s;
  }
  double sum_squares(const Tensor& x) override {
    In xp(x);
    const int64_t n = x.numel();
    constexpr int64_t kChunk = int64_t{1} << 15;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(std::max<int64_t>(chunks, 1), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      double s = 0.0;
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
        s += static_cast<double>(xp.p()[i]) * xp.p()[i];
      partial[c] = s;
    }
    double s = 0.0;
    for (double p : partial) s += p;
    return s;
  }
  void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef,
                       int64_t index) override {
    scale_copy(y, x, f32_of(coef)[index]);
  }
  void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index) override {
    axpy(y, x, f32_of(coef)[index]);
  }
  void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index) override {
    f32_of(out)[index] = static_cast<float>(a.numel() ? dot(a, b) : 0.0);
  }
  // The host Newton-Schulz's normalization exactly: chunked fp64 sum, division in double.
  void normalize_frobenius(const Tensor& x, double scale, double eps) override {
    const double d = std::sqrt(sum_squares(x)) * scale + eps;
    InOut xp(x);
    for (int64_t i = 0; i < x.numel(); ++i)
      xp.p()[i] = static_cast<float>(static_cast<double>(xp.p()[i]) / d);
  }
  void add_scalar(const Tensor& t, int64_t index, double value) override {
    f32_of(t)[index] += static_cast<float>(value);
  }
  void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols) override {
    In xp(x);
    Out yp(y);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) yp.p()[c * rows + r] = xp.p()[r * cols + c];
  }

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
#endif  // with CUDA: src/core/cuda_backend.cc

}  // namespace vt
