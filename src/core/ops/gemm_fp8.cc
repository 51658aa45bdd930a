// The FP8 GEMM (GemmArgs::fp8_a / fp8_b, core/ops/gemm.h): per-tensor current scaling with
// power-of-two scales (core/fp8.h), op(A) and op(B)^T quantized K-contiguous, the product with
// fp32 accumulation and alpha * (1 / scale_B) * (1 / scale_A) as its factor. CUDA: kernels/fp8.cu
// quantizes into stream-ordered scratch, cuBLASLt multiplies the codes (core/cuda_gemm.h fp8()).
// Host: the same operands rounded to the FP8 grid as fp32 values (fake quantization) and one
// fp32 GEMM in the same layout with the same factor, so the two backends differ only where the
// GEMM's reduction order does (on the CUDA emulation, whose cuBLASLt calls the same OpenBLAS
// sgemm in the same layout: bit for bit). Also the weights' FP8 cache (ops::Fp8WeightCacheScope):
// a weight B quantized once per scope, both layouts, on either backend.
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/cpu_kernels.h"
#include "core/fp8.h"
#include "core/ops/dispatch.h"
#include "core/ops/gemm.h"
#include "core/ops/host_window.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_gemm.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda_acts.h"
#include "kernels/fp8.cuh"
#endif

namespace vt::ops::detail {
namespace {

// The tally behind fp8_tally_take(): host counts, and for device GEMMs a device array of
// [kind][operand][saturated, underflow] counters that the quantize kernels add to, allocated on
// the first counted device GEMM (one device per process) and read at a take.
struct TallyStore {
  std::mutex mu;
  Fp8Tally host;
#if VTRAIN_HAS_CUDA
  CudaRuntime* rt = nullptr;
  unsigned long long* dev = nullptr;
#endif
};
TallyStore& tally_store() {
  static TallyStore* t = new TallyStore;  // never destroyed: the device array outlives exit order
  return *t;
}
constexpr int kTallyCounters = kFp8GemmKinds * 2 * 2;

// One operand quantized on the host: q[r * cols + c] = the FP8 grid value of x(r, c) * scale,
// x(r, c) = src[r * ld + c], or src[c * ld + r] when transposed.
struct HostQuant {
  std::vector<float> q;
  float amax = 0, scale = 0;
  int64_t saturated = 0, underflow = 0;
};

HostQuant quantize_host(const float* src, int64_t rows, int64_t cols, int64_t ld,
                        bool transposed, Fp8Format f) {
  auto at = [&](int64_t r, int64_t c) { return transposed ? src[c * ld + r] : src[r * ld + c]; };
  HostQuant h;
  uint32_t amax_bits = 0;  // max of |x|'s bits: NaN (above inf) wins, as on the GPU
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(at(r, c));
      uint32_t bits;
      std::memcpy(&bits, &a, 4);
      amax_bits = bits > amax_bits ? bits : amax_bits;
    }
  std::memcpy(&h.amax, &amax_bits, 4);
  h.scale = fp8_scale(h.amax, f);
  const float mx = fp8_max(f);
  h.q.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float x = at(r, c), y = x * h.scale, v = fp8_round(y, f);
      h.q[size_t(r * cols + c)] = v;
      if (std::fabs(y) > mx) ++h.saturated;
      if (x != 0.0f && v == 0.0f) ++h.underflow;
    }
  return h;
}

void check_fp8_args(const GemmArgs& g) {
  VT_CHECK_MSG(g.fp8_a != Fp8Format::kNone && g.fp8_b != Fp8Format::kNone,
               "gemm fp8: set both operand formats (got " << fp8_format_name(g.fp8_a) << ", "
                                                          << fp8_format_name(g.fp8_b) << ")");
  VT_CHECK_MSG(!(g.fp8_a == Fp8Format::kE5M2 && g.fp8_b == Fp8Format::kE5M2),
               "gemm fp8: E5M2 x E5M2 is not a cuBLASLt FP8 GEMM");
  VT_CHECK_MSG(g.K > 0 && g.K % 16 == 0,
               "gemm fp8: K must be a positive multiple of 16 (cuBLASLt's FP8 rule), got " << g.K);
  for (const Tensor* t : {&g.A, &g.B})
    VT_CHECK_MSG(t->dtype() == DType::kF32 || t->dtype() == DType::kBF16,
                 "gemm fp8: A and B must be f32 or bf16, got " << dtype_name(t->dtype()));
  VT_CHECK_MSG(g.C.dtype() == DType::kF32 || g.C.dtype() == DType::kBF16,
               "gemm fp8: C must be f32 or bf16, got " << dtype_name(g.C.dtype()));
  if (g.addend.defined()) {
    VT_CHECK_MSG(g.addend.dtype() == g.C.dtype() && g.addend.numel() == g.C.numel() &&
                     g.addend.device() == g.C.device(),
                 "gemm fp8: the addend must have C's dtype, device and size");
    const char* ab = static_cast<const char*>(g.addend.raw());
    const char* cb = static_cast<const char*>(g.C.raw());
    VT_CHECK_MSG(ab + g.addend.nbytes() <= cb || cb + g.C.nbytes() <= ab,
                 "gemm fp8: the addend overlaps C");
  }
}

// The weights' FP8 cache (ops::Fp8WeightCacheScope): per weight, its codes in the stored layout
// (rows x cols) and transposed (cols x rows), one amax, one scale, and the counts of one
// quantization. Host entries hold the fake-quantized values, device entries the codes and the
// quantization state in one stream-ordered allocation.
struct WeightKey {
  const void* ptr;
  int64_t rows, cols, ld;
  DType dtype;
  Fp8Format format;
  bool device;
  bool operator==(const WeightKey&) const = default;
};
struct WeightEntry {
  WeightKey key;
  HostQuant plain, transposed;
#if VTRAIN_HAS_CUDA
  CudaRuntime* rt = nullptr;
  char* buf = nullptr;  // codes, codes_t (each rows * cols rounded to 16 bytes), the state
  int64_t codes_bytes = 0;
  uint8_t* codes() const { return reinterpret_cast<uint8_t*>(buf); }
  uint8_t* codes_t() const { return reinterpret_cast<uint8_t*>(buf) + codes_bytes; }
  cuda::Fp8QuantState* state() const {
    return reinterpret_cast<cuda::Fp8QuantState*>(buf + 2 * codes_bytes);
  }
#endif
};
struct WeightCache {
  std::mutex mu;
  int depth = 0;  // live scopes
  std::vector<std::unique_ptr<WeightEntry>> entries;
  ops::Fp8WeightCacheStats stats;
};
WeightCache& weight_cache() {
  static WeightCache* c = new WeightCache;  // never destroyed (device memory outlives exit order)
  return *c;
}

// The entry for the weight stored as rows x cols (leading dimension ld) in `t`, filled on a miss
// by `fill`; nullptr when no scope is alive.
template <class Fill>
WeightEntry* weight_entry(const Tensor& t, int64_t rows, int64_t cols, int64_t ld, Fp8Format f,
                          Fill fill) {
  WeightCache& c = weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.depth == 0) return nullptr;
  const WeightKey key{t.raw(), rows, cols, ld, t.dtype(), f, t.device() != Device::kCPU};
  for (auto& e : c.entries)
    if (e->key == key) {
      ++c.stats.hits;
      return e.get();
    }
  auto e = std::make_unique<WeightEntry>();
  e->key = key;
  c.stats.bytes += fill(*e);
  ++c.stats.fills;
  c.entries.push_back(std::move(e));
  return c.entries.back().get();
}

}  // namespace

void gemm_fp8(const GemmArgs& g) {
  check_fp8_args(g);
  const bool addend = g.addend.defined();
  const double flops = 2.0 * g.M * g.N * g.K;
  auto d = addend ? on("gemm_fp8", {&g.A, &g.B, &g.C, &g.addend}, flops)
                  : on("gemm_fp8", {&g.A, &g.B, &g.C}, flops);
  if (g.M == 0 || g.N == 0) return;
  // op(A) is (M,K): stored (K,M) when trans_a. op(B)^T is (N,K): stored (N,K) when trans_b,
  // else B (K,N) read transposed.
  const bool a_transposed = g.trans_a, b_transposed = !g.trans_b;
  // B as stored: (K, N) when read transposed, else (N, K).
  const int64_t b_srows = b_transposed ? g.K : g.N, b_scols = b_transposed ? g.N : g.K;
#if VTRAIN_HAS_CUDA
  if (CudaRuntime* rt = d.cuda()) {
    using namespace cuda_acts;
    rt->on_device();
    const cudaStream_t s = rt->stream();
    auto round16 = [](int64_t n) { return (n + 15) / 16 * 16; };
    // B's weight entry: both layouts quantized once per scope (not while capturing a graph).
    WeightEntry* wb = nullptr;
    if (g.fp8_b_weight) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      VT_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
      if (capture == cudaStreamCaptureStatusNone)
        wb = weight_entry(g.B, b_srows, b_scols, g.ldb, g.fp8_b, [&](WeightEntry& e) {
          e.rt = rt;
          e.codes_bytes = round16(g.N * g.K);
          VT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&e.buf),
                                        size_t(2 * e.codes_bytes) + sizeof(cuda::Fp8QuantState),
                                        s));
          VT_CUDA_CHECK(cudaMemsetAsync(e.state(), 0, sizeof(cuda::Fp8QuantState), s));
          if (g.B.dtype() == DType::kF32) {
            cuda::fp8_amax(f32p(g.B), b_srows, b_scols, g.ldb, false, e.state(), s);
            cuda::fp8_quantize_both(f32p(g.B), b_srows, b_scols, g.ldb, g.fp8_b, e.codes(),
                                    e.codes_t(), e.state(), s);
          } else {
            cuda::fp8_amax(bf16p(g.B), b_srows, b_scols, g.ldb, false, e.state(), s);
            cuda::fp8_quantize_both(bf16p(g.B), b_srows, b_scols, g.ldb, g.fp8_b, e.codes(),
                                    e.codes_t(), e.state(), s);
          }
          return 2 * e.codes_bytes;
        });
    }
    const int64_t bytes_a = round16(g.M * g.K), bytes_b = wb ? 0 : round16(g.N * g.K);
    char* buf = nullptr;
    VT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&buf),
                                  size_t(bytes_a + bytes_b) + 2 * sizeof(cuda::Fp8QuantState), s));
    uint8_t* qa = reinterpret_cast<uint8_t*>(buf);
    uint8_t* qb = wb ? (b_transposed ? wb->codes_t() : wb->codes()) : qa + bytes_a;
    auto* st = reinterpret_cast<cuda::Fp8QuantState*>(buf + bytes_a + bytes_b);
    VT_CUDA_CHECK(cudaMemsetAsync(st, 0, 2 * sizeof(cuda::Fp8QuantState), s));
    unsigned long long* tally = nullptr;  // [operand][saturated, underflow] of this kind
    if (g.fp8_tally_kind >= 0) {
      TallyStore& t = tally_store();
      std::lock_guard<std::mutex> lock(t.mu);
      if (!t.dev) {
        VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&t.dev),
                                 kTallyCounters * sizeof(unsigned long long)));
        VT_CUDA_CHECK(cudaMemsetAsync(t.dev, 0, kTallyCounters * sizeof(unsigned long long), s));
        t.rt = rt;
      }
      VT_CHECK_MSG(t.rt == rt, "FP8 tally: one device per process");
      ++t.host.gemms[g.fp8_tally_kind];
      tally = t.dev + g.fp8_tally_kind * 4;
    }
    auto quantize = [&](const Tensor& t, int64_t rows, int64_t ld, bool transposed, Fp8Format f,
                        uint8_t* codes, cuda::Fp8QuantState* state, unsigned long long* tl) {
      if (t.dtype() == DType::kF32) {
        cuda::fp8_amax(f32p(t), rows, g.K, ld, transposed, state, s);
        cuda::fp8_quantize(f32p(t), rows, g.K, ld, transposed, f, codes, state, s, tl);
      } else {
        cuda::fp8_amax(bf16p(t), rows, g.K, ld, transposed, state, s);
        cuda::fp8_quantize(bf16p(t), rows, g.K, ld, transposed, f, codes, state, s, tl);
      }
    };
    quantize(g.A, g.M, g.lda, a_transposed, g.fp8_a, qa, &st[0], tally);
    if (wb)
      cuda::fp8_reuse(wb->state(), &st[1], s, tally ? tally + 2 : nullptr);
    else
      quantize(g.B, g.N, g.ldb, b_transposed, g.fp8_b, qb, &st[1], tally ? tally + 2 : nullptr);
    auto type = [](Fp8Format f) { return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
    const cudaDataType_t ct = g.C.dtype() == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    rt->gemm().fp8(g.M, g.N, g.K, g.alpha, qa, type(g.fp8_a), g.K, &st[0].scale_inv, qb,
                   type(g.fp8_b), g.K, &st[1].scale_inv, g.beta, g.C.raw(), ct, g.ldc, s,
                   addend ? g.addend.raw() : nullptr);
    if (g.fp8_stats) {
      cuda::Fp8QuantState h[2];
      VT_CUDA_CHECK(cudaMemcpyAsync(h, st, sizeof(h), cudaMemcpyDeviceToHost, s));
      VT_CUDA_CHECK(cudaStreamSynchronize(s));
      Fp8GemmStats& o = *g.fp8_stats;
      std::memcpy(&o.amax_a, &h[0].amax_bits, 4);
      std::memcpy(&o.amax_b, &h[1].amax_bits, 4);
      o.scale_a = h[0].scale, o.scale_b = h[1].scale;
      o.saturated_a = int64_t(h[0].saturated), o.saturated_b = int64_t(h[1].saturated);
      o.underflow_a = int64_t(h[0].underflow), o.underflow_b = int64_t(h[1].underflow);
    }
    VT_CUDA_CHECK(cudaFreeAsync(buf, s));
    return;
  }
#endif
  if (addend) g.C.copy_from(g.addend);
  HostQuant qa, qb_own;
  const HostQuant* qb_p = &qb_own;
  {
    host::In a(g.A), b(g.B);
    qa = quantize_host(a.p(), g.M, g.K, g.lda, a_transposed, g.fp8_a);
    WeightEntry* wb = nullptr;
    if (g.fp8_b_weight)
      wb = weight_entry(g.B, b_srows, b_scols, g.ldb, g.fp8_b, [&](WeightEntry& e) {
        e.plain = quantize_host(b.p(), b_srows, b_scols, g.ldb, false, g.fp8_b);
        e.transposed = e.plain;
        for (int64_t r = 0; r < b_srows; ++r)
          for (int64_t c = 0; c < b_scols; ++c)
            e.transposed.q[size_t(c * b_srows + r)] = e.plain.q[size_t(r * b_scols + c)];
        return int64_t(2 * e.plain.q.size() * sizeof(float));
      });
    if (wb)
      qb_p = b_transposed ? &wb->transposed : &wb->plain;
    else
      qb_own = quantize_host(b.p(), g.N, g.K, g.ldb, b_transposed, g.fp8_b);
  }
  const HostQuant& qb = *qb_p;
  // The factor as cuBLASLt forms it: alpha * (its A' = our B's scale) * (its B' = our A's).
  const float alpha = g.alpha * (1.0f / qb.scale) * (1.0f / qa.scale);
  {
    host::InOut c(g.C);
    cpu::gemm<float>(false, true, g.M, g.N, g.K, alpha, qa.q.data(), g.K, qb.q.data(), g.K, g.beta,
                     c.p(), g.ldc);
  }
  if (g.fp8_tally_kind >= 0) {
    TallyStore& t = tally_store();
    std::lock_guard<std::mutex> lock(t.mu);
    const int k = g.fp8_tally_kind;
    ++t.host.gemms[k];
    t.host.saturated[k][0] += qa.saturated, t.host.saturated[k][1] += qb.saturated;
    t.host.underflow[k][0] += qa.underflow, t.host.underflow[k][1] += qb.underflow;
  }
  if (g.fp8_stats) {
    Fp8GemmStats& o = *g.fp8_stats;
    o.amax_a = qa.amax, o.amax_b = qb.amax, o.scale_a = qa.scale, o.scale_b = qb.scale;
    o.saturated_a = qa.saturated, o.saturated_b = qb.saturated;
    o.underflow_a = qa.underflow, o.underflow_b = qb.underflow;
  }
}

}  // namespace vt::ops::detail

namespace vt::ops {

using detail::need_f32;

Fp8Tally fp8_tally_take() {
  detail::TallyStore& t = detail::tally_store();
  std::lock_guard<std::mutex> lock(t.mu);
  Fp8Tally out = t.host;
  t.host = Fp8Tally{};
#if VTRAIN_HAS_CUDA
  if (t.dev) {
    t.rt->on_device();
    const cudaStream_t s = t.rt->stream();
    unsigned long long h[detail::kTallyCounters];
    VT_CUDA_CHECK(cudaMemcpyAsync(h, t.dev, sizeof(h), cudaMemcpyDeviceToHost, s));
    VT_CUDA_CHECK(cudaMemsetAsync(t.dev, 0, sizeof(h), s));
    VT_CUDA_CHECK(cudaStreamSynchronize(s));
    for (int k = 0; k < kFp8GemmKinds; ++k)
      for (int o = 0; o < 2; ++o) {
        out.saturated[k][o] += int64_t(h[k * 4 + o * 2]);
        out.underflow[k][o] += int64_t(h[k * 4 + o * 2 + 1]);
      }
  }
#endif
  return out;
}

Fp8WeightCacheScope::Fp8WeightCacheScope() {
  detail::WeightCache& c = detail::weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.depth;
}

Fp8WeightCacheScope::~Fp8WeightCacheScope() {
  detail::WeightCache& c = detail::weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (--c.depth > 0) return;
#if VTRAIN_HAS_CUDA
  for (auto& e : c.entries)
    if (e->buf) {
      e->rt->on_device();
      VT_CUDA_CHECK(cudaFreeAsync(e->buf, e->rt->stream()));
    }
#endif
  c.entries.clear();
  c.stats.bytes = 0;
}

Fp8WeightCacheStats fp8_weight_cache_stats() {
  detail::WeightCache& c = detail::weight_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

namespace {
void check_inner(const char* what, int64_t K, const char* dim) {
  VT_CHECK_MSG(K % 16 == 0, "--fp8 e4m3: the " << what << " GEMM's inner dimension (" << dim
                                               << " = " << K
                                               << ") must be a multiple of 16 (cuBLASLt's FP8 "
                                                  "rule); run this shape with --fp8 off");
}
}  // namespace

void matmul_fp8(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate,
                Fp8GemmStats* stats, bool w_is_weight) {
  VT_CHECK(w.ndim() == 2);
  const int64_t K = w.dim(0), N = w.dim(1), M = x.numel() / K;
  VT_CHECK_MSG(x.numel() == M * K && y.numel() == M * N,
               "matmul_fp8 shapes x" << shape_str(x.shape()) << " w" << shape_str(w.shape())
                                     << " y" << shape_str(y.shape()));
  check_inner("forward", K, "input features");
  GemmArgs g;
  g.M = M, g.N = N, g.K = K;
  g.A = x, g.B = w, g.C = y;
  g.lda = K, g.ldb = N, g.ldc = N;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.fp8_a = Fp8Format::kE4M3, g.fp8_b = Fp8Format::kE4M3;
  g.fp8_stats = stats;
  g.fp8_tally_kind = int(Fp8GemmKind::kForward);
  g.fp8_b_weight = w_is_weight;
  gemm(g);
}

void matmul_dx_fp8(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate,
                   Fp8GemmStats* stats, bool w_is_weight) {
  VT_CHECK(w.ndim() == 2);
  const int64_t K = w.dim(0), N = w.dim(1), M = dy.numel() / N;
  VT_CHECK_MSG(dy.numel() == M * N && dx.numel() == M * K,
               "matmul_dx_fp8 shapes dy" << shape_str(dy.shape()) << " w" << shape_str(w.shape())
                                         << " dx" << shape_str(dx.shape()));
  check_inner("data-gradient", N, "output features");
  GemmArgs g;
  g.trans_b = true;
  g.M = M, g.N = K, g.K = N;
  g.A = dy, g.B = w, g.C = dx;
  g.lda = N, g.ldb = N, g.ldc = K;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.fp8_a = Fp8Format::kE5M2, g.fp8_b = Fp8Format::kE4M3;
  g.fp8_stats = stats;
  g.fp8_tally_kind = int(Fp8GemmKind::kDataGrad);
  g.fp8_b_weight = w_is_weight;
  gemm(g);
}

void matmul_dw_fp8(const Tensor& x, const Tensor& dy, const Tensor& dw, Fp8GemmStats* stats) {
  VT_CHECK(dw.ndim() == 2);
  need_f32("matmul_dw_fp8", dw, "the weight gradient");
  const int64_t K = dw.dim(0), N = dw.dim(1), M = x.numel() / K;
  VT_CHECK_MSG(x.numel() == M * K && dy.numel() == M * N,
               "matmul_dw_fp8 shapes x" << shape_str(x.shape()) << " dy" << shape_str(dy.shape())
                                        << " dw" << shape_str(dw.shape()));
  check_inner("weight-gradient", M, "tokens of the micro-batch");
  GemmArgs g;
  g.trans_a = true;
  g.M = K, g.N = N, g.K = M;
  g.A = x, g.B = dy, g.C = dw;
  g.lda = K, g.ldb = N, g.ldc = N;
  g.beta = 1.0f;
  g.fp8_a = Fp8Format::kE4M3, g.fp8_b = Fp8Format::kE5M2;
  g.fp8_stats = stats;
  g.fp8_tally_kind = int(Fp8GemmKind::kWeightGrad);
  gemm(g);
}

}  // namespace vt::ops
