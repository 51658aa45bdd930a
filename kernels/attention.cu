// CUDA causal sliding-window GQA attention (forward + backward), flash-style tiles: the reference
// kernels. The CUDA backend runs bf16 attention on the tensor-core kernels of attention_tc.cu
// where they apply; these run f32 (and everything else) and are what the tensor-core kernels are
// tested against.
//
// Correctness first, no tuning (no tensor cores, scalar fp32 dot products from shared memory). Tiles are kTile query rows x kTile key rows; every tile is converted to fp32 in shared
// memory with a row stride of hd + 1 (avoids bank conflicts on the column walks).
//
// Forward: one block per (query tile, head, batch). It visits only the key tiles its rows can
// see, s in [max(0, t0 - W + 1), t1), with the online softmax (running max m, running sum l,
// O rescaled by exp(m_old - m_new)); out = O / l and lse = m + log(l), as the CPU kernel.
//
// Backward recomputes P = exp(scale * q.k - lse) and uses D = rowsum(dO * O):
//   dS = P * (dP - D) * scale with dP = dO V^T;  dQ = dS K;  dK = sum dS^T Q;  dV = sum P^T dO.
// Three kernels: D (one thread per row), dQ (one block per (query tile, head, batch), loops over
// the visible key tiles), dK/dV (one block per (key tile, KV head, batch), loops over the query
// heads of the group and the query tiles that can see the key tile, t in [s0, s1 - 1 + W)).
// Each output element has one owner block and a fixed summation order: deterministic, no atomics.
//
// An optional fixed bias (f32 (T, T), [query][key], --attn-bias) is added to the scaled scores
// wherever they are formed (forward and both backward kernels); masked entries are never read.
#include "kernels/attention.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::nan_max;

constexpr int kTile = 32;
constexpr int kThreads = 128;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store_f(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

// dst (kTile, ld) fp32 <- rows [row0, row0 + kTile) of head `head` of src (B, Tn, heads, hd);
// rows at or past Tn are zero.
template <class T>
__device__ void load_tile(float* dst, int ld, const T* src, int64_t b, int64_t row0, int64_t Tn,
                          int64_t heads, int64_t head, int hd) {
  for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
    const int r = idx / hd, c = idx % hd;
    const int64_t t = row0 + r;
    dst[r * ld + c] = t < Tn ? to_f(src[((b * Tn + t) * heads + head) * hd + c]) : 0.0f;
  }
}

// rows [row0, row0 + kTile) of head `head` of dst (B, Tn, heads, hd) <- src (kTile, ld) * mul[r]
// (mul may be null); rows at or past Tn are skipped.
template <class T>
__device__ void store_tile(T* dst, const float* src, int ld, const float* mul, int64_t b,
                           int64_t row0, int64_t Tn, int64_t heads, int64_t head, int hd) {
  for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
    const int r = idx / hd, c = idx % hd;
    const int64_t t = row0 + r;
    if (t < Tn) {
      const float x = src[r * ld + c] * (mul ? mul[r] : 1.0f);
      store_f(&dst[((b * Tn + t) * heads + head) * hd + c], x);
    }
  }
}

__device__ __forceinline__ bool visible(int64_t t, int64_t s, int64_t Tn, int64_t W) {
  return t < Tn && s <= t && t - s < W;
}

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int c = 0; c < n; ++c) acc = fmaf(a[c], b[c], acc);
  return acc;
}

// ---------------------------------------------------------------------------------------------
// Forward. Shared: Q, K, V, O (kTile, ld) | S (kTile, kTile) | m, l, alpha (kTile).
template <class T>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    T* __restrict__ out, float* __restrict__ lse, int64_t Tn, int H, int Hkv,
                    int hd, int64_t W, float scale, const float* __restrict__ bias) {
  VT_DYNAMIC_SHARED(float, smem);
  const int ld = hd + 1;
  float* Qs = smem;
  float* Ks = Qs + kTile * ld;
  float* Vs = Ks + kTile * ld;
  float* Os = Vs + kTile * ld;
  float* Ss = Os + kTile * ld;
  float* m_s = Ss + kTile * kTile;
  float* l_s = m_s + kTile;
  float* a_s = l_s + kTile;

  const int64_t t0 = int64_t(blockIdx.x) * kTile;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int g = h / (H / Hkv);
  const int tid = threadIdx.x;

  load_tile(Qs, ld, q, b, t0, Tn, H, h, hd);
  for (int idx = tid; idx < kTile * ld; idx += blockDim.x) Os[idx] = 0.0f;
  if (tid < kTile) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  __syncthreads();

  const int64_t t1 = t0 + kTile < Tn ? t0 + kTile : Tn;
  const int64_t s_lo = t0 - W + 1 > 0 ? t0 - W + 1 : 0;
  for (int64_t s0 = s_lo; s0 < t1; s0 += kTile) {
    load_tile(Ks, ld, k, b, s0, Tn, Hkv, g, hd);
    load_tile(Vs, ld, v, b, s0, Tn, Hkv, g, hd);
    __syncthreads();
    for (int idx = tid; idx < kTile * kTile; idx += blockDim.x) {
      const int i = idx / kTile, j = idx % kTile;
      float sc = -INFINITY;
      if (visible(t0 + i, s0 + j, Tn, W)) {
        sc = dot(Qs + i * ld, Ks + j * ld, hd) * scale;
        if (bias) sc += bias[(t0 + i) * Tn + s0 + j];
      }
      Ss[idx] = sc;
    }
    __syncthreads();
    if (tid < kTile) {  // online softmax, one thread per query row
      float* row = Ss + tid * kTile;
      float mx = -INFINITY;
      for (int j = 0; j < kTile; ++j) mx = nan_max(mx, row[j]);
      const float m_old = m_s[tid];
      const float m_new = nan_max(m_old, mx);
      if (m_new == -INFINITY) {  // nothing visible yet for this row
        for (int j = 0; j < kTile; ++j) row[j] = 0.0f;
        a_s[tid] = 1.0f;
      } else {
        float sum = 0.0f;
        for (int j = 0; j < kTile; ++j) {
          const float p = expf(row[j] - m_new);  // exp(-inf) = 0 for masked keys
          row[j] = p;
          sum += p;
        }
        const float alpha = expf(m_old - m_new);  // 0 when m_old = -inf
        l_s[tid] = l_s[tid] * alpha + sum;
        m_s[tid] = m_new;
        a_s[tid] = alpha;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < kTile * hd; idx += blockDim.x) {
      const int i = idx / hd, c = idx % hd;
      const float* prow = Ss + i * kTile;
      float acc = Os[i * ld + c] * a_s[i];
      for (int j = 0; j < kTile; ++j) acc = fmaf(prow[j], Vs[j * ld + c], acc);
      Os[i * ld + c] = acc;
    }
    __syncthreads();
  }

  // Every real row sees at least its own key (W >= 1), so l > 0 there.
  if (tid < kTile) a_s[tid] = l_s[tid] > 0.0f ? 1.0f / l_s[tid] : 0.0f;
  __syncthreads();
  store_tile(out, Os, ld, a_s, b, t0, Tn, H, h, hd);
  if (tid < kTile && t0 + tid < Tn)
    lse[(b * H + h) * Tn + t0 + tid] = m_s[tid] + logf(l_s[tid]);
}

// ---------------------------------------------------------------------------------------------
// D[b,h,t] = sum_c dO[b,t,h,c] * O[b,t,h,c]; one thread per (b, t, h) row.
template <class T>
__global__ void attn_bwd_d_kernel(const T* __restrict__ out, const T* __restrict__ dout,
                                  float* __restrict__ D, int64_t B, int64_t Tn, int H, int hd) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= B * Tn * H) return;
  const int64_t b = r / (Tn * H), t = (r / H) % Tn, h = r % H;
  const T* o = out + r * hd;
  const T* d = dout + r * hd;
  float acc = 0.0f;
  for (int c = 0; c < hd; ++c) acc = fmaf(to_f(o[c]), to_f(d[c]), acc);
  D[(b * H + h) * Tn + t] = acc;
}

// Loads lse and D of rows [t0, t0 + kTile) of (b, h) into shared (0 past Tn).
__device__ void load_rows(float* lse_s, float* D_s, const float* lse, const float* D, int64_t b,
                          int64_t h, int H, int64_t t0, int64_t Tn) {
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    const int64_t t = t0 + i;
    lse_s[i] = t < Tn ? lse[(b * H + h) * Tn + t] : 0.0f;
    D_s[i] = t < Tn ? D[(b * H + h) * Tn + t] : 0.0f;
  }
}

// P[i][j] and dS[i][j] of query rows t0 + i and key rows s0 + j (0 where not visible).
__device__ void probs_and_dscores(float* Ps, float* dSs, const float* Qs, const float* dOs,
                                  const float* Ks, const float* Vs, const float* lse_s,
                                  const float* D_s, int ld, int hd, int64_t t0, int64_t s0,
                                  int64_t Tn, int64_t W, float scale, const float* bias) {
  for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
    const int i = idx / kTile, j = idx % kTile;
    float p = 0.0f, ds = 0.0f;
    if (visible(t0 + i, s0 + j, Tn, W)) {
      const float b = bias ? bias[(t0 + i) * Tn + s0 + j] : 0.0f;
      p = expf(dot(Qs + i * ld, Ks + j * ld, hd) * scale + b - lse_s[i]);
      const float dp = dot(dOs + i * ld, Vs + j * ld, hd);
      ds = p * (dp - D_s[i]) * scale;
    }
    if (Ps) Ps[idx] = p;
    dSs[idx] = ds;
  }
}

// dQ. Shared: Q, dO, dQ, K, V (kTile, ld) | dS (kTile, kTile) | lse, D (kTile).
template <class T>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       const float* __restrict__ lse, const float* __restrict__ D,
                       const T* __restrict__ dout, T* __restrict__ dq, int64_t Tn, int H,
                       int Hkv, int hd, int64_t W, float scale, const float* __restrict__ bias) {
  VT_DYNAMIC_SHARED(float, smem);
  const int ld = hd + 1;
  float* Qs = smem;
  float* dOs = Qs + kTile * ld;
  float* dQs = dOs + kTile * ld;
  float* Ks = dQs + kTile * ld;
  float* Vs = Ks + kTile * ld;
  float* dSs = Vs + kTile * ld;
  float* lse_s = dSs + kTile * kTile;
  float* D_s = lse_s + kTile;

  const int64_t t0 = int64_t(blockIdx.x) * kTile;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int g = h / (H / Hkv);
  const int tid = threadIdx.x;

  load_tile(Qs, ld, q, b, t0, Tn, H, h, hd);
  load_tile(dOs, ld, dout, b, t0, Tn, H, h, hd);
  for (int idx = tid; idx < kTile * ld; idx += blockDim.x) dQs[idx] = 0.0f;
  load_rows(lse_s, D_s, lse, D, b, h, H, t0, Tn);
  __syncthreads();

  const int64_t t1 = t0 + kTile < Tn ? t0 + kTile : Tn;
  const int64_t s_lo = t0 - W + 1 > 0 ? t0 - W + 1 : 0;
  for (int64_t s0 = s_lo; s0 < t1; s0 += kTile) {
    load_tile(Ks, ld, k, b, s0, Tn, Hkv, g, hd);
    load_tile(Vs, ld, v, b, s0, Tn, Hkv, g, hd);
    __syncthreads();
    probs_and_dscores(nullptr, dSs, Qs, dOs, Ks, Vs, lse_s, D_s, ld, hd, t0, s0, Tn, W, scale,
                      bias);
    __syncthreads();
    for (int idx = tid; idx < kTile * hd; idx += blockDim.x) {
      const int i = idx / hd, c = idx % hd;
      const float* dsrow = dSs + i * kTile;
      float acc = dQs[i * ld + c];
      for (int j = 0; j < kTile; ++j) acc = fmaf(dsrow[j], Ks[j * ld + c], acc);
      dQs[i * ld + c] = acc;
    }
    __syncthreads();
  }
  store_tile(dq, dQs, ld, nullptr, b, t0, Tn, H, h, hd);
}

// dK, dV. Shared: K, V, dK, dV, Q, dO (kTile, ld) | P, dS (kTile, kTile) | lse, D (kTile).
template <class T>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dkdv_kernel(const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, const float* __restrict__ lse,
                         const float* __restrict__ D, const T* __restrict__ dout,
                         T* __restrict__ dk, T* __restrict__ dv, int64_t Tn, int H, int Hkv,
                         int hd, int64_t W, float scale, const float* __restrict__ bias) {
  VT_DYNAMIC_SHARED(float, smem);
  const int ld = hd + 1;
  float* Ks = smem;
  float* Vs = Ks + kTile * ld;
  float* dKs = Vs + kTile * ld;
  float* dVs = dKs + kTile * ld;
  float* Qs = dVs + kTile * ld;
  float* dOs = Qs + kTile * ld;
  float* Ps = dOs + kTile * ld;
  float* dSs = Ps + kTile * kTile;
  float* lse_s = dSs + kTile * kTile;
  float* D_s = lse_s + kTile;

  const int64_t s0 = int64_t(blockIdx.x) * kTile;
  const int g = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int group = H / Hkv;
  const int tid = threadIdx.x;

  load_tile(Ks, ld, k, b, s0, Tn, Hkv, g, hd);
  load_tile(Vs, ld, v, b, s0, Tn, Hkv, g, hd);
  for (int idx = tid; idx < kTile * ld; idx += blockDim.x) {
    dKs[idx] = 0.0f;
    dVs[idx] = 0.0f;
  }

  const int64_t s1 = s0 + kTile < Tn ? s0 + kTile : Tn;
  const int64_t t_end = s1 - 1 + W < Tn ? s1 - 1 + W : Tn;  // last query that sees s1 - 1, + 1
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t t0 = s0; t0 < t_end; t0 += kTile) {
      __syncthreads();  // previous iteration done with Q, dO, P, dS
      load_tile(Qs, ld, q, b, t0, Tn, H, h, hd);
      load_tile(dOs, ld, dout, b, t0, Tn, H, h, hd);
      load_rows(lse_s, D_s, lse, D, b, h, H, t0, Tn);
      __syncthreads();
      probs_and_dscores(Ps, dSs, Qs, dOs, Ks, Vs, lse_s, D_s, ld, hd, t0, s0, Tn, W, scale, bias);
      __syncthreads();
      for (int idx = tid; idx < kTile * hd; idx += blockDim.x) {
        const int j = idx / hd, c = idx % hd;  // key row j, column c
        float acc_k = dKs[j * ld + c], acc_v = dVs[j * ld + c];
        for (int i = 0; i < kTile; ++i) {
          acc_k = fmaf(dSs[i * kTile + j], Qs[i * ld + c], acc_k);
          acc_v = fmaf(Ps[i * kTile + j], dOs[i * ld + c], acc_v);
        }
        dKs[j * ld + c] = acc_k;
        dVs[j * ld + c] = acc_v;
      }
    }
  }
  __syncthreads();
  store_tile(dk, dKs, hd + 1, nullptr, b, s0, Tn, Hkv, g, hd);
  store_tile(dv, dVs, hd + 1, nullptr, b, s0, Tn, Hkv, g, hd);
}

// ---------------------------------------------------------------------------------------------
void check_shape(const AttnShape& s) {
  VT_CUDA_REQUIRE(s.B >= 1 && s.T >= 1 && s.H >= 1 && s.Hkv >= 1 && s.hd >= 1,
                  "attention shape must have B, T, H, Hkv, hd >= 1");
  VT_CUDA_REQUIRE(s.H % s.Hkv == 0, "H must be a multiple of Hkv");
  VT_CUDA_REQUIRE(s.window >= 1, "attention window must be >= 1");
  VT_CUDA_REQUIRE(s.H <= 65535 && s.Hkv <= 65535 && s.B <= 65535,
                  "B, H, Hkv must be <= 65535 (grid y/z limits)");
}

// Raises the kernel's dynamic shared-memory limit to `bytes` (checked against the device).
template <class Kernel>
void prepare_smem(Kernel kernel, size_t bytes) {
  set_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes,
                   "attention (reference kernel) at this head dim");
}

// Dynamic shared memory of each kernel (see the layouts above the kernels).
size_t fwd_smem(int hd) {
  return sizeof(float) * (4 * kTile * (hd + 1) + kTile * kTile + 3 * kTile);
}
size_t dq_smem(int hd) {
  return sizeof(float) * (5 * kTile * (hd + 1) + kTile * kTile + 2 * kTile);
}
size_t dkdv_smem(int hd) {
  return sizeof(float) * (6 * kTile * (hd + 1) + 2 * kTile * kTile + 2 * kTile);
}

template <class T>
void forward_impl(const T* q, const T* k, const T* v, T* out, float* lse, const AttnShape& s,
                  float scale, const float* bias, cudaStream_t stream) {
  check_shape(s);
  const int64_t W = std::min(s.window, s.T);
  const int hd = int(s.hd);
  const size_t smem = fwd_smem(hd);
  prepare_smem(attn_fwd_kernel<T>, smem);
  const dim3 grid(unsigned((s.T + kTile - 1) / kTile), unsigned(s.H), unsigned(s.B));
  VT_LAUNCH(attn_fwd_kernel<T>, grid, kThreads, smem, stream, q, k, v, out, lse, s.T, int(s.H),
            int(s.Hkv), hd, W, scale, bias);
  VT_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void backward_impl(const T* q, const T* k, const T* v, const T* out, const float* lse,
                   const T* dout, T* dq, T* dk, T* dv, const AttnShape& s, float scale,
                   const float* bias, void* workspace, cudaStream_t stream) {
  check_shape(s);
  VT_CUDA_REQUIRE(workspace != nullptr, "attention backward needs a workspace");
  const int64_t W = std::min(s.window, s.T);
  const int hd = int(s.hd), H = int(s.H), Hkv = int(s.Hkv);
  float* D = static_cast<float*>(workspace);  // (B, H, T)

  const int64_t rows = s.B * s.T * s.H;
  VT_LAUNCH(attn_bwd_d_kernel<T>, unsigned((rows + 255) / 256), 256, 0, stream, out, dout, D, s.B,
            s.T, H, hd);
  VT_CUDA_CHECK(cudaGetLastError());

  const unsigned ntiles = unsigned((s.T + kTile - 1) / kTile);
  const size_t smem_dq = dq_smem(hd);
  prepare_smem(attn_bwd_dq_kernel<T>, smem_dq);
  VT_LAUNCH(attn_bwd_dq_kernel<T>, dim3(ntiles, unsigned(H), unsigned(s.B)), kThreads, smem_dq,
            stream, q, k, v, lse, D, dout, dq, s.T, H, Hkv, hd, W, scale, bias);
  VT_CUDA_CHECK(cudaGetLastError());

  const size_t smem_kv = dkdv_smem(hd);
  prepare_smem(attn_bwd_dkdv_kernel<T>, smem_kv);
  VT_LAUNCH(attn_bwd_dkdv_kernel<T>, dim3(ntiles, unsigned(Hkv), unsigned(s.B)), kThreads, smem_kv,
            stream, q, k, v, lse, D, dout, dk, dv, s.T, H, Hkv, hd, W, scale, bias);
  VT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t attention_backward_workspace_bytes(const AttnShape& s) {
  return sizeof(float) * size_t(s.B) * size_t(s.H) * size_t(s.T);
}

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttnShape& s, float scale, cudaStream_t stream, const float* bias) {
  forward_impl(q, k, v, out, lse, s, scale, bias, stream);
}
void attention_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       __nv_bfloat16* out, float* lse, const AttnShape& s, float scale,
                       cudaStream_t stream, const float* bias) {
  forward_impl(q, k, v, out, lse, s, scale, bias, stream);
}

void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv,
                        const AttnShape& s, float scale, void* workspace, cudaStream_t stream,
                        const float* bias) {
  backward_impl(q, k, v, out, lse, dout, dq, dk, dv, s, scale, bias, workspace, stream);
}
void attention_backward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* dout,
                        __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                        const AttnShape& s, float scale, void* workspace, cudaStream_t stream,
                        const float* bias) {
  backward_impl(q, k, v, out, lse, dout, dq, dk, dv, s, scale, bias, workspace, stream);
}

}  // namespace vt::cuda
