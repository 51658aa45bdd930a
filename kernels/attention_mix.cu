// CUDA shaped-attention / NeuTRENO terms (see attention_mix.cuh).
//
// Forward: one thread per (batch, KV head, channel) column walks t = 0..T-1 keeping the window
// sum of v in double (add v[t], drop v[t - W]) and writes every head of the group at t. Loads
// and stores of consecutive channels are coalesced.
// Backward, kernel 1 (same threads): a forward walk recomputes the window mean and writes
// dsoft = beta * dout, adds the identity/NeuTRENO terms into dv, writes dv1, and accumulates
// the thread's share of the gain gradients in registers (written to the workspace); then a
// backward walk adds the transpose of the running mean, dv[s] += sum_{t=s}^{s+W-1} u[t] with
// u[t] = -sum_h gamma[h] dout[t,h] / count(t), recomputed from dout (no storage).
// Kernel 2: one thread per head sums the workspace in a fixed order into dalpha/dbeta/dgamma.
#include "kernels/attention_mix.cuh"

#include <cstdint>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store_f(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

template <class T>
__global__ void mix_fwd_kernel(const T* __restrict__ soft, const T* __restrict__ v,
                               const T* __restrict__ v1, const float* __restrict__ alpha,
                               const float* __restrict__ beta, const float* __restrict__ gamma,
                               float lam, T* __restrict__ out, int64_t B, int64_t Tn, int H,
                               int Hkv, int hd, int64_t W) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= B * Hkv * hd) return;
  const int64_t b = col / (int64_t(Hkv) * hd);
  const int g = int((col / hd) % Hkv), c = int(col % hd);
  const int group = H / Hkv;
  double sum = 0.0;
  for (int64_t t = 0; t < Tn; ++t) {
    const int64_t voff = ((b * Tn + t) * Hkv + g) * hd + c;
    const float vt = to_f(v[voff]);
    if (gamma) {
      sum += double(vt);
      if (t >= W) sum -= double(to_f(v[((b * Tn + t - W) * Hkv + g) * hd + c]));
    }
    const double inv = 1.0 / double(t + 1 < W ? t + 1 : W);
    const float v1t = lam != 0.0f ? to_f(v1[voff]) : 0.0f;
    for (int k = 0; k < group; ++k) {
      const int h = g * group + k;
      const int64_t off = ((b * Tn + t) * H + h) * hd + c;
      const double be = beta ? beta[h] : 1.0, al = alpha ? alpha[h] : 0.0;
      double o = be * double(to_f(soft[off])) + (al - double(lam)) * double(vt);
      if (gamma) o -= double(gamma[h]) * sum * inv;
      if (lam != 0.0f) o += double(lam) * double(v1t);
      store_f(&out[off], float(o));
    }
  }
}

template <class T>
__global__ void mix_bwd_kernel(const T* __restrict__ dout, const T* __restrict__ soft,
                               const T* __restrict__ v, const float* __restrict__ alpha,
                               const float* __restrict__ beta, const float* __restrict__ gamma,
                               float lam, T* __restrict__ dsoft, T* __restrict__ dv,
                               T* __restrict__ dv1, double* __restrict__ ws, int64_t B,
                               int64_t Tn, int H, int Hkv, int hd, int64_t W) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= B * Hkv * hd) return;
  const int64_t b = col / (int64_t(Hkv) * hd);
  const int g = int((col / hd) % Hkv), c = int(col % hd);
  const int group = H / Hkv;
  double part[kMixMaxGroup * 3];
  for (int j = 0; j < group * 3; ++j) part[j] = 0.0;
  double sum = 0.0;
  for (int64_t t = 0; t < Tn; ++t) {
    const int64_t voff = ((b * Tn + t) * Hkv + g) * hd + c;
    const float vt = to_f(v[voff]);
    if (gamma) {
      sum += double(vt);
      if (t >= W) sum -= double(to_f(v[((b * Tn + t - W) * Hkv + g) * hd + c]));
    }
    const double inv = 1.0 / double(t + 1 < W ? t + 1 : W);
    double direct = 0.0, total = 0.0;
    for (int k = 0; k < group; ++k) {
      const int h = g * group + k;
      const int64_t off = ((b * Tn + t) * H + h) * hd + c;
      const double d = double(to_f(dout[off]));
      const double be = beta ? beta[h] : 1.0, al = alpha ? alpha[h] : 0.0;
      store_f(&dsoft[off], float(be * d));
      direct += (al - double(lam)) * d;
      total += d;
      part[k * 3 + 0] += d * double(vt);
      part[k * 3 + 1] += d * double(to_f(soft[off]));
      if (gamma) part[k * 3 + 2] -= d * sum * inv;
    }
    store_f(&dv[voff], float(double(to_f(dv[voff])) + direct));
    if (dv1) store_f(&dv1[voff], float(double(lam) * total));
  }
  if (gamma) {
    auto u = [&](int64_t t) {
      double acc = 0.0;
      for (int k = 0; k < group; ++k) {
        const int h = g * group + k;
        acc -= double(gamma[h]) * double(to_f(dout[((b * Tn + t) * H + h) * hd + c]));
      }
      return acc / double(t + 1 < W ? t + 1 : W);
    };
    double r = 0.0;
    for (int64_t t = Tn - 1; t >= 0; --t) {
      const int64_t voff = ((b * Tn + t) * Hkv + g) * hd + c;
      r += u(t);
      if (t + W < Tn) r -= u(t + W);
      store_f(&dv[voff], float(double(to_f(dv[voff])) + r));
    }
  }
  for (int j = 0; j < group * 3; ++j) ws[col * group * 3 + j] = part[j];
}

// One thread per head: dalpha/dbeta/dgamma[h] += sum over (batch, channel) of the workspace.
__global__ void mix_reduce_kernel(const double* __restrict__ ws, float* __restrict__ dalpha,
                                  float* __restrict__ dbeta, float* __restrict__ dgamma,
                                  int64_t B, int H, int Hkv, int hd) {
  const int h = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h >= H) return;
  const int group = H / Hkv, g = h / group, k = h % group;
  double acc[3] = {0.0, 0.0, 0.0};
  for (int64_t b = 0; b < B; ++b)
    for (int c = 0; c < hd; ++c) {
      const double* p = ws + (((b * Hkv + g) * hd + c) * group + k) * 3;
      acc[0] += p[0];
      acc[1] += p[1];
      acc[2] += p[2];
    }
  if (dalpha) dalpha[h] += float(acc[0]);
  if (dbeta) dbeta[h] += float(acc[1]);
  if (dgamma) dgamma[h] += float(acc[2]);
}

void check_shape(const AttnShape& s) {
  VT_CUDA_REQUIRE(s.B >= 1 && s.T >= 1 && s.H >= 1 && s.Hkv >= 1 && s.hd >= 1,
                  "attention shape must have B, T, H, Hkv, hd >= 1");
  VT_CUDA_REQUIRE(s.H % s.Hkv == 0, "H must be a multiple of Hkv");
  VT_CUDA_REQUIRE(s.H / s.Hkv <= kMixMaxGroup,
                  "shaped attention kernels serve at most 16 query heads per KV head");
  VT_CUDA_REQUIRE(s.window >= 1, "attention window must be >= 1");
}

unsigned blocks_for(const AttnShape& s) {
  const int64_t cols = s.B * s.Hkv * s.hd;
  return unsigned((cols + kThreads - 1) / kThreads);
}

template <class T>
void forward_impl(const T* soft, const T* v, const T* v1, const float* alpha, const float* beta,
                  const float* gamma, float lam, T* out, const AttnShape& s, cudaStream_t stream) {
  check_shape(s);
  VT_CUDA_REQUIRE(lam == 0.0f || v1 != nullptr, "the NeuTRENO term needs v1");
  const int64_t W = s.window < s.T ? s.window : s.T;
  VT_LAUNCH(mix_fwd_kernel<T>, blocks_for(s), kThreads, 0, stream, soft, v, v1, alpha, beta,
            gamma, lam, out, s.B, s.T, int(s.H), int(s.Hkv), int(s.hd), W);
  VT_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void backward_impl(const T* dout, const T* soft, const T* v, const float* alpha,
                   const float* beta, const float* gamma, float lam, T* dsoft, T* dv,
                   float* dalpha, float* dbeta, float* dgamma, T* dv1, const AttnShape& s,
                   void* workspace, cudaStream_t stream) {
  check_shape(s);
  VT_CUDA_REQUIRE(workspace != nullptr, "shaped attention backward needs a workspace");
  const int64_t W = s.window < s.T ? s.window : s.T;
  double* ws = static_cast<double*>(workspace);
  VT_LAUNCH(mix_bwd_kernel<T>, blocks_for(s), kThreads, 0, stream, dout, soft, v, alpha, beta,
            gamma, lam, dsoft, dv, dv1, ws, s.B, s.T, int(s.H), int(s.Hkv), int(s.hd), W);
  VT_CUDA_CHECK(cudaGetLastError());
  if (dalpha || dbeta || dgamma) {
    VT_LAUNCH(mix_reduce_kernel, unsigned((s.H + 63) / 64), 64, 0, stream, ws, dalpha, dbeta,
              dgamma, s.B, int(s.H), int(s.Hkv), int(s.hd));
    VT_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

size_t attention_mix_workspace_bytes(const AttnShape& s) {
  return sizeof(double) * size_t(s.B) * size_t(s.H) * size_t(s.hd) * 3;
}

void attention_mix_forward(const float* soft, const float* v, const float* v1,
                           const float* alpha, const float* beta, const float* gamma, float lam,
                           float* out, const AttnShape& s, cudaStream_t stream) {
  forward_impl(soft, v, v1, alpha, beta, gamma, lam, out, s, stream);
}
void attention_mix_forward(const __nv_bfloat16* soft, const __nv_bfloat16* v,
                           const __nv_bfloat16* v1, const float* alpha, const float* beta,
                           const float* gamma, float lam, __nv_bfloat16* out, const AttnShape& s,
                           cudaStream_t stream) {
  forward_impl(soft, v, v1, alpha, beta, gamma, lam, out, s, stream);
}

void attention_mix_backward(const float* dout, const float* soft, const float* v,
                            const float* alpha, const float* beta, const float* gamma, float lam,
                            float* dsoft, float* dv, float* dalpha, float* dbeta, float* dgamma,
                            float* dv1, const AttnShape& s, void* workspace, cudaStream_t stream) {
  backward_impl(dout, soft, v, alpha, beta, gamma, lam, dsoft, dv, dalpha, dbeta, dgamma, dv1, s,
                workspace, stream);
}
void attention_mix_backward(const __nv_bfloat16* dout, const __nv_bfloat16* soft,
                            const __nv_bfloat16* v, const float* alpha, const float* beta,
                            const float* gamma, float lam, __nv_bfloat16* dsoft,
                            __nv_bfloat16* dv, float* dalpha, float* dbeta, float* dgamma,
                            __nv_bfloat16* dv1, const AttnShape& s, void* workspace,
                            cudaStream_t stream) {
  backward_impl(dout, soft, v, alpha, beta, gamma, lam, dsoft, dv, dalpha, dbeta, dgamma, dv1, s,
                workspace, stream);
}

}  // namespace vt::cuda
