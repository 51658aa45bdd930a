// The CPU backend (the reference every other backend is tested against) and the device
// emulator. Both compute with the fp32 kernels of cpu_kernels.h; bf16 tensors are widened to
// fp32 for the kernel and rounded back to bf16 (round-to-nearest-even) when written, which is
// what the GPU kernels do with fp32 math on bf16 storage. The emulator differs from the CPU
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
#include "optim/adamw.h"
#include "optim/muon.h"

#if VTRAIN_HAS_CUDA
#include "kernels/cuda_check.cuh"
#endif

namespace vt {

namespace {

// An fp32 window onto a tensor's elements: the memory itself for f32 tensors, a widened copy for
// bf16 ones (written back, rounded, when `writes` and the window closes).
class F32 {
 public:
  F32(const Tensor& t, bool reads = true, bool writes = false) : t_(t), writes_(writes) {
    if (t.dtype() == DType::kF32) {
      p_ = static_cast<float*>(t.raw());
      return;
    }
    VT_CHECK_MSG(t.dtype() == DType::kBF16, "expected an f32 or bf16 tensor, got "
                                                << dtype_name(t.dtype()));
    buf_.resize(t.numel());
    if (reads) {
      const uint16_t* h = static_cast<const uint16_t*>(t.raw());
      for (int64_t i = 0; i < t.numel(); ++i) buf_[i] = bf16_to_f32(h[i]);
    }
    p_ = buf_.data();
  }
  ~F32() {
    if (!writes_ || t_.dtype() != DType::kBF16) return;
    uint16_t* h = static_cast<uint16_t*>(t_.raw());
    for (int64_t i = 0; i < t_.numel(); ++i) h[i] = f32_to_bf16(buf_[i]);
  }
  F32(const F32&) = delete;
  F32& operator=(const F32&) = delete;
  float* p() const { return p_; }
  operator float*() const { return p_; }

 private:
  Tensor t_;
  bool writes_;
  float* p_ = nullptr;
  std::vector<float> buf_;
};

// Read-only, write-only and read-write windows.
struct In : F32 { explicit In(const Tensor& t) : F32(t, true, false) {} };
struct Out : F32 { explicit Out(const Tensor& t) : F32(t, false, true) {} };
struct InOut : F32 { explicit InOut(const Tensor& t) : F32(t, true, true) {} };

const int32_t* ids_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kI32, "ids must be i32");
  return static_cast<const int32_t*>(t.raw());
}
float* f32_of(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32, "expected an f32 tensor, got " << dtype_name(t.dtype()));
  return static_cast<float*>(t.raw());
}

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

  void rmsnorm(const Tensor& x, const Tensor& y, const Tensor& rstd, int64_t rows, int64_t C,
               float scale, double eps) override {
    In xp(x);
    Out yp(y);
    cpu::rmsnorm_forward<float>(xp, yp, f32_of(rstd), rows, C, scale, eps);
  }
  void rmsnorm_backward(const Tensor& x, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                        int64_t rows, int64_t C, float scale, bool accumulate) override {
    In xp(x), dyp(dy);
    F32 dxp(dx, accumulate, true);
    cpu::rmsnorm_backward<float>(xp, f32_of(rstd), dyp, dxp, rows, C, scale, accumulate);
  }
  void rope(const Tensor& x, const Tensor& y, double base, int64_t pos_offset,
            bool backward) override {
    In xp(x);
    Out yp(y);
    if (backward)
      cpu::rope_backward<float>(xp, yp, x.dim(0), x.dim(1), x.dim(2), x.dim(3), base, pos_offset);
    else
      cpu::rope_forward<float>(xp, yp, x.dim(0), x.dim(1), x.dim(2), x.dim(3), base, pos_offset);
  }
  static const float* maybe_f32(const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, int64_t window, float scale, const Tensor& bias) override {
    In qp(q), kp(k), vp(v);
    Out op(out);
    cpu::attention_forward<float>(qp, kp, vp, op, f32_of(lse), ops::attention_shape(q, k, window),
                                  scale, maybe_f32(bias));
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, int64_t window, float scale,
                          const Tensor& bias) override {
    In qp(q), kp(k), vp(v), op(out), dop(dout);
    Out dqp(dq), dkp(dk), dvp(dv);
    cpu::attention_backward<float>(qp, kp, vp, op, f32_of(lse), dop, dqp, dkp, dvp,
                                   ops::attention_shape(q, k, window), scale, maybe_f32(bias));
  }
  void attention_mix(const Tensor& soft, const Tensor& v, const AttnMix& m, int64_t window,
                     const Tensor& out) override {
    In sp(soft), vp(v);
    Out op(out);
    std::unique_ptr<In> v1p;
    if (m.lam != 0.0f) v1p = std::make_unique<In>(m.v1);
    cpu::attention_mix_forward<float>(sp, vp, v1p ? v1p->p() : nullptr, maybe_f32(m.alpha),
                                      maybe_f32(m.beta), maybe_f32(m.gamma), m.lam, op,
                                      ops::attention_shape(soft, v, window));
  }
  void attention_mix_backward(const Tensor& dout, const Tensor& soft, const Tensor& v,
                              const AttnMix& m, int64_t window, const Tensor& dsoft,
                              const Tensor& dv, const AttnMixGrads& g) override {
    In dop(dout), sp(soft), vp(v);
    Out dsp(dsoft);
    InOut dvp(dv);
    std::unique_ptr<Out> dv1p;
    if (g.dv1.defined()) dv1p = std::make_unique<Out>(g.dv1);
    auto mut = [](const Tensor& t) { return t.defined() ? f32_of(t) : nullptr; };
    cpu::attention_mix_backward<float>(dop, sp, vp, nullptr, maybe_f32(m.alpha), maybe_f32(m.beta),
                                       maybe_f32(m.gamma), m.lam, dsp, dvp, mut(g.dalpha),
                                       mut(g.dbeta), mut(g.dgamma), dv1p ? dv1p->p() : nullptr,
                                       ops::attention_shape(soft, v, window));
  }
  void relu2(const Tensor& x, const Tensor& y) override {
    In xp(x);
    Out yp(y);
    cpu::relu2_forward<float>(xp, yp, x.numel());
  }
  void relu2_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                      bool accumulate) override {
    In xp(x), dyp(dy);
    F32 dxp(dx, accumulate, true);
    cpu::relu2_backward<float>(xp, dyp, dxp, x.numel(), accumulate);
  }
  void embedding(const Tensor& table, int64_t row_begin, const Tensor& ids,
                 const Tensor& out) override {
    Out op(out);
    const int64_t C = table.dim(-1);
    cpu::embedding_forward<float>(f32_of(table), row_begin, table.dim(0), C, ids_of(ids),
                                  ids.numel(), op);
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_begin,
                          const Tensor& dtable) override {
    In dp(dout);
    cpu::embedding_backward<float>(dp, ids_of(ids), ids.numel(), row_begin, dtable.dim(0),
                                   dtable.dim(-1), f32_of(dtable));
  }
  void xent_partial(const XentArgs& x, const Tensor& row_max, const Tensor& row_sumexp,
                    const Tensor& target_z) override {
    In lp(x.logits);
    cpu::xent_partial_forward<float>(lp, x.logits.numel() / x.logits.dim(-1), x.logits.dim(-1),
                                     x.n_valid, x.col_offset, ids_of(x.targets), x.cap,
                                     f32_of(row_max), f32_of(row_sumexp), f32_of(target_z));
  }
  void xent_rescale(const Tensor& row_sumexp, const Tensor& row_max,
                    const Tensor& global_max) override {
    float* s = f32_of(row_sumexp);
    const float* m = f32_of(row_max);
    const float* g = f32_of(global_max);
    for (int64_t n = 0; n < row_sumexp.numel(); ++n) s[n] *= std::exp(m[n] - g[n]);
  }
  void xent_finish(const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_z,
                   const Tensor& lse, const Tensor& loss) override {
    const float* m = f32_of(row_max);
    const float* s = f32_of(row_sumexp);
    const float* t = f32_of(target_z);
    float* l = f32_of(lse);
    float* o = f32_of(loss);
    for (int64_t n = 0; n < lse.numel(); ++n) {
      l[n] = m[n] + std::log(s[n]);
      o[n] = l[n] - t[n];
    }
  }
  void xent_backward(const XentArgs& x, const Tensor& lse, float grad_scale,
                     const Tensor& dlogits) override {
    In lp(x.logits);
    Out dp(dlogits);
    const int64_t N = x.logits.numel() / x.logits.dim(-1);
    std::vector<float> dloss(N, grad_scale);
    cpu::xent_backward<float>(lp, N, x.logits.dim(-1), x.n_valid, x.col_offset, ids_of(x.targets),
                              x.cap, f32_of(lse), dloss.data(), dp);
  }
  void gate_sigmoid(const Tensor& z, float gate_scale) override {
    float* p = f32_of(z);
    for (int64_t i = 0; i < z.numel(); ++i) p[i] = gate_scale / (1.0f + std::exp(-p[i]));
  }
  void gated_mix(const Tensor& ctx, const Tensor& emb, const Tensor& gate,
                 const Tensor& v) override {
    In cp(ctx), ep(emb);
    Out vp(v);
    const float* g = f32_of(gate);
    const int64_t G = gate.numel(), hd = v.numel() / G;
    for (int64_t r = 0; r < G; ++r)
      for (int64_t d = 0; d < hd; ++d) vp.p()[r * hd + d] = cp.p()[r * hd + d] + g[r] * ep.p()[r * hd + d];
  }
  void gated_mix_backward(const Tensor& dv, const Tensor& emb, const Tensor& gate,
                          const Tensor& demb, const Tensor& dgate) override {
    In dvp(dv), ep(emb);
    Out dep(demb);
    const float* g = f32_of(gate);
    float* dg = f32_of(dgate);
    const int64_t G = gate.numel(), hd = dv.numel() / G;
    for (int64_t r = 0; r < G; ++r) {
      double s = 0.0;
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t o = r * hd + d;
        s += static_cast<double>(dvp.p()[o]) * ep.p()[o];
        dep.p()[o] = g[r] * dvp.p()[o];
      }
      dg[r] = static_cast<float>(s);
    }
  }
  void gate_sigmoid_backward(const Tensor& gate, const Tensor& dgate, float gate_scale,
                             const Tensor& dz) override {
    const float* g = f32_of(gate);
    const float* dg = f32_of(dgate);
    Out dzp(dz);
    for (int64_t i = 0; i < gate.numel(); ++i)
      dzp.p()[i] = static_cast<float>(static_cast<double>(dg[i]) * g[i] * (1.0 - g[i] / gate_scale));
  }

  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                    const AdamWStepArgs& a) override {
    optim::AdamWHyper h;
    h.beta1 = a.beta1;
    h.beta2 = a.beta2;
    h.weight_decay = a.weight_decay;
    h.eps = a.eps;
    optim::adamw_update(f32_of(p), f32_of(g), f32_of(m), f32_of(v), p.numel(), h, a.lr, a.t);
  }
  void muon_momentum(const Tensor& g, const Tensor& buf, const Tensor& u,
                     double momentum) override {
    optim::muon_momentum(f32_of(g), f32_of(buf), f32_of(u), g.numel(), momentum);
  }
  void muon_apply(const Tensor& p, const Tensor& x, double lr, double weight_decay,
                  double scale) override {
    optim::muon_apply(f32_of(p), f32_of(x), p.numel(), lr, weight_decay, scale);
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
