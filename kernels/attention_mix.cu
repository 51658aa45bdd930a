// CUDA shaped-attention / NeuTRENO terms (see attention_mix.cuh).
//
// A block is 32 consecutive (batch, KV head, channel) columns (threadIdx.x: coalesced loads and
// stores) x up to 16 chunks of the sequence (threadIdx.y); each thread walks its chunk. The window
// sum of v at t is C(t) - C(t - W), C the running sum: a thread starts from the chunk sums before
// it (shared memory) plus at most one chunk's partial walk, and carries both ends as it walks.
// (One thread per column walking all of T, as first written, left 12,288 threads for d24 at
// micro-batch 8 and ran 7x slower than the softmax attention it adds to on an H200, 2026-11-26.)
// Backward: the same forward walk writes dsoft, the direct dv and dv1 terms and the thread's gain
// partials (to the workspace, per column and chunk), then a walk from the chunk's end adds the
// transpose of the running mean, dv[s] += D(s) - D(s + W) with D the suffix sum of
// u[t] = -sum_h gamma[h] dout[t,h] / count(t) (recomputed from dout, no storage).
// With a centring term given by the caller (E-SPA/U-SPA, MixSpa) no window sums are walked: its
// gradient is written per element for the caller, and the rowscale D[t] scales the mixed terms.
// A reduce kernel, one thread per head, sums the workspace in a fixed order into dalpha/dbeta/
// dgamma: deterministic.
#include "kernels/attention_mix.cuh"

#include <cstdint>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {


__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store_f(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

// Chunked layout: a block is kLanes consecutive columns (threadIdx.x, coalesced loads) x up to
// kMaxChunks chunks of the sequence (threadIdx.y), each thread walking its chunk. The window sum
// at t is C(t) - C(t - W) with C the running sum of v; a thread starts from C at its chunk's start
// (the chunk sums before it, from shared memory) and C at its trailing edge (those sums plus a
// partial walk of at most one chunk), then keeps both as it walks. The backward's transposed
// window sum runs the same way over u from the end. Same values as one serial walk up to the
// rounding of double sums.
constexpr int kLanes = 32;
constexpr int kMaxChunks = 16;  // 512 threads a block: room for the backward's ~90 registers

struct Chunking {
  int chunks;   // blockDim.y
  int64_t len;  // tokens per chunk (the last may be shorter or empty)
};

__host__ __device__ inline Chunking chunking(int64_t Tn) {
  const int c = int(Tn < kMaxChunks ? Tn : kMaxChunks);
  return {c, (Tn + c - 1) / c};
}

template <class T>
__device__ double v_at(const T* v, int64_t b, int64_t t, int64_t Tn, int Hkv, int g, int hd, int c) {
  return double(to_f(v[((b * Tn + t) * Hkv + g) * hd + c]));
}

// u(t) = -D[t] sum_h gamma[h] dout[t, h] / count(t): the backward's input to the transposed
// window sum (D the rowscale, 1 when null).
template <class T>
__device__ double u_at(const T* dout, const float* gamma, const float* rowscale, int64_t b,
                       int64_t t, int64_t Tn, int H, int g, int group, int hd, int c, int64_t W) {
  double acc = 0.0;
  for (int k = 0; k < group; ++k) {
    const int h = g * group + k;
    acc -= double(gamma[h]) * double(to_f(dout[((b * Tn + t) * H + h) * hd + c]));
  }
  if (rowscale) acc *= double(rowscale[t]);
  return acc / double(t + 1 < W ? t + 1 : W);
}

// C(x) = sum_{s <= x} f(s) for x in [-1, Tn), from the block's chunk sums (sums[y][lane]) and a
// walk of at most one chunk.
template <class F>
__device__ double prefix_at(int64_t x, const double (*sums)[kLanes], int lane, Chunking ch, F f) {
  if (x < 0) return 0.0;
  const int64_t k = x / ch.len;
  double acc = 0.0;
  for (int64_t i = 0; i < k; ++i) acc += sums[i][lane];
  for (int64_t s = k * ch.len; s <= x; ++s) acc += f(s);
  return acc;
}

// D(x) = sum_{s >= x} f(s) for x in [0, Tn], the same way from the end.
template <class F>
__device__ double suffix_at(int64_t x, int64_t Tn, const double (*sums)[kLanes], int lane,
                            Chunking ch, F f) {
  if (x >= Tn) return 0.0;
  const int64_t k = x / ch.len;
  double acc = 0.0;
  for (int64_t i = k + 1; i < ch.chunks; ++i) acc += sums[i][lane];
  const int64_t end = (k + 1) * ch.len < Tn ? (k + 1) * ch.len : Tn;
  for (int64_t s = x; s < end; ++s) acc += f(s);
  return acc;
}

template <class T>
__global__ void __launch_bounds__(kLanes * kMaxChunks, 1) mix_fwd_kernel(const T* __restrict__ soft, const T* __restrict__ v,
                               const T* __restrict__ v1, const float* __restrict__ alpha,
                               const float* __restrict__ beta, const float* __restrict__ gamma,
                               float lam, const float* __restrict__ rowscale,
                               const T* __restrict__ centre, T* __restrict__ out, int64_t B,
                               int64_t Tn, int H, int Hkv, int hd, int64_t W) {
  __shared__ double vsum[kMaxChunks][kLanes];
  const bool running = gamma != nullptr && centre == nullptr;  // (uniform across the block)
  const int lane = threadIdx.x, y = threadIdx.y;
  const int64_t col = int64_t(blockIdx.x) * kLanes + lane;
  const bool active = col < B * Hkv * hd;
  const int64_t b = active ? col / (int64_t(Hkv) * hd) : 0;
  const int g = active ? int((col / hd) % Hkv) : 0, c = active ? int(col % hd) : 0;
  const int group = H / Hkv;
  const Chunking ch = chunking(Tn);
  const int64_t t0 = y * ch.len, t1 = t0 + ch.len < Tn ? t0 + ch.len : Tn;
  auto vf = [&](int64_t t) { return v_at(v, b, t, Tn, Hkv, g, hd, c); };
  if (running) {
    double s = 0.0;
    if (active)
      for (int64_t t = t0; t < t1; ++t) s += vf(t);
    vsum[y][lane] = s;
    __syncthreads();
  }
  if (!active || t0 >= Tn) return;  // (a chunk past the end: T not a multiple of its length)
  double lead = 0.0, trail = 0.0;  // C(t - 1), C(t - 1 - W) before each step
  if (running) {
    lead = prefix_at(t0 - 1, vsum, lane, ch, vf);
    trail = prefix_at(t0 - 1 - W, vsum, lane, ch, vf);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t voff = ((b * Tn + t) * Hkv + g) * hd + c;
    const float vt = to_f(v[voff]);
    if (running) {
      lead += double(vt);
      if (t >= W) trail += vf(t - W);
    }
    const double M = !gamma ? 0.0
                     : centre ? double(to_f(centre[voff]))
                              : (lead - trail) / double(t + 1 < W ? t + 1 : W);
    const double D = rowscale ? double(rowscale[t]) : 1.0;
    const float v1t = lam != 0.0f ? to_f(v1[voff]) : 0.0f;
    for (int k = 0; k < group; ++k) {
      const int h = g * group + k;
      const int64_t off = ((b * Tn + t) * H + h) * hd + c;
      const double be = beta ? beta[h] : 1.0, al = alpha ? alpha[h] : 0.0;
      double mixed = be * double(to_f(soft[off]));
      if (gamma) mixed -= double(gamma[h]) * M;
      double o = D * mixed + (al - double(lam)) * double(vt);
      if (lam != 0.0f) o += double(lam) * double(v1t);
      store_f(&out[off], float(o));
    }
  }
}

// ws: per (column, chunk) the gain-gradient partials, group * 3 doubles each.
template <class T>
__global__ void __launch_bounds__(kLanes * kMaxChunks, 1) mix_bwd_kernel(const T* __restrict__ dout, const T* __restrict__ soft,
                               const T* __restrict__ v, const float* __restrict__ alpha,
                               const float* __restrict__ beta, const float* __restrict__ gamma,
                               float lam, const float* __restrict__ rowscale,
                               const T* __restrict__ centre, T* __restrict__ dsoft,
                               T* __restrict__ dv, T* __restrict__ dv1, T* __restrict__ dcentre,
                               double* __restrict__ ws, int64_t B, int64_t Tn, int H, int Hkv,
                               int hd, int64_t W) {
  __shared__ double vsum[kMaxChunks][kLanes];
  __shared__ double usum[kMaxChunks][kLanes];
  const bool running = gamma != nullptr && centre == nullptr;  // (uniform across the block)
  const int lane = threadIdx.x, y = threadIdx.y;
  const int64_t col = int64_t(blockIdx.x) * kLanes + lane;
  const bool active = col < B * Hkv * hd;
  const int64_t b = active ? col / (int64_t(Hkv) * hd) : 0;
  const int g = active ? int((col / hd) % Hkv) : 0, c = active ? int(col % hd) : 0;
  const int group = H / Hkv;
  const Chunking ch = chunking(Tn);
  const int64_t t0 = y * ch.len, t1 = t0 + ch.len < Tn ? t0 + ch.len : Tn;
  auto vf = [&](int64_t t) { return v_at(v, b, t, Tn, Hkv, g, hd, c); };
  auto uf = [&](int64_t t) {
    return u_at(dout, gamma, rowscale, b, t, Tn, H, g, group, hd, c, W);
  };
  if (running) {
    double sv = 0.0, su = 0.0;
    if (active)
      for (int64_t t = t0; t < t1; ++t) sv += vf(t), su += uf(t);
    vsum[y][lane] = sv;
    usum[y][lane] = su;
    __syncthreads();
  }
  if (!active) return;
  double part[kMixMaxGroup * 3];
  for (int j = 0; j < group * 3; ++j) part[j] = 0.0;
  double* mine = ws + (col * ch.chunks + y) * group * 3;
  if (t0 >= Tn) {  // a chunk past the end: no partials
    for (int j = 0; j < group * 3; ++j) mine[j] = 0.0;
    return;
  }
  double lead = 0.0, trail = 0.0;
  if (running) {
    lead = prefix_at(t0 - 1, vsum, lane, ch, vf);
    trail = prefix_at(t0 - 1 - W, vsum, lane, ch, vf);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t voff = ((b * Tn + t) * Hkv + g) * hd + c;
    const float vt = to_f(v[voff]);
    if (running) {
      lead += double(vt);
      if (t >= W) trail += vf(t - W);
    }
    const double M = !gamma ? 0.0
                     : centre ? double(to_f(centre[voff]))
                              : (lead - trail) / double(t + 1 < W ? t + 1 : W);
    const double D = rowscale ? double(rowscale[t]) : 1.0;
    double direct = 0.0, total = 0.0, ug = 0.0;
    for (int k = 0; k < group; ++k) {
      const int h = g * group + k;
      const int64_t off = ((b * Tn + t) * H + h) * hd + c;
      const double d = double(to_f(dout[off]));
      const double be = beta ? beta[h] : 1.0, al = alpha ? alpha[h] : 0.0;
      store_f(&dsoft[off], float(D * be * d));
      direct += (al - double(lam)) * d;
      total += d;
      part[k * 3 + 0] += d * double(vt);
      part[k * 3 + 1] += d * D * double(to_f(soft[off]));
      if (gamma) {
        part[k * 3 + 2] -= d * D * M;
        ug -= double(gamma[h]) * d;
      }
    }
    if (dcentre) store_f(&dcentre[voff], float(D * ug));
    store_f(&dv[voff], float(double(to_f(dv[voff])) + direct));
    if (dv1) store_f(&dv1[voff], float(double(lam) * total));
  }
  if (running) {
    // dv[s] += sum_{t=s}^{s+W-1} u(t) = D(s) - D(s + W), walked from the chunk's end.
    double r_lead = suffix_at(t1, Tn, usum, lane, ch, uf);
    double r_trail = suffix_at(t1 + W, Tn, usum, lane, ch, uf);
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const int64_t voff = ((b * Tn + t) * Hkv + g) * hd + c;
      r_lead += uf(t);
      if (t + W < Tn) r_trail += uf(t + W);
      store_f(&dv[voff], float(double(to_f(dv[voff])) + (r_lead - r_trail)));
    }
  }
  for (int j = 0; j < group * 3; ++j) mine[j] = part[j];
}

// One thread per head: dalpha/dbeta/dgamma[h] += sum over (batch, channel) of the workspace.
__global__ void mix_reduce_kernel(const double* __restrict__ ws, float* __restrict__ dalpha,
                                  float* __restrict__ dbeta, float* __restrict__ dgamma,
                                  int64_t B, int H, int Hkv, int hd, int chunks) {
  const int h = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h >= H) return;
  const int group = H / Hkv, g = h / group, k = h % group;
  double acc[3] = {0.0, 0.0, 0.0};
  for (int64_t b = 0; b < B; ++b)
    for (int c = 0; c < hd; ++c)
      for (int y = 0; y < chunks; ++y) {
        const double* p = ws + ((((b * Hkv + g) * hd + c) * chunks + y) * group + k) * 3;
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
  return unsigned((cols + kLanes - 1) / kLanes);
}

dim3 threads_for(const AttnShape& s) { return dim3(kLanes, unsigned(chunking(s.T).chunks)); }

template <class T>
void forward_impl(const T* soft, const T* v, const T* v1, const float* alpha, const float* beta,
                  const float* gamma, float lam, T* out, const AttnShape& s,
                  const MixSpa<T>& spa, cudaStream_t stream) {
  check_shape(s);
  VT_CUDA_REQUIRE(lam == 0.0f || v1 != nullptr, "the NeuTRENO term needs v1");
  const int64_t W = s.window < s.T ? s.window : s.T;
  VT_LAUNCH(mix_fwd_kernel<T>, blocks_for(s), threads_for(s), 0, stream, soft, v, v1, alpha, beta,
            gamma, lam, spa.rowscale, spa.centre, out, s.B, s.T, int(s.H), int(s.Hkv), int(s.hd),
            W);
  VT_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void backward_impl(const T* dout, const T* soft, const T* v, const float* alpha,
                   const float* beta, const float* gamma, float lam, T* dsoft, T* dv,
                   float* dalpha, float* dbeta, float* dgamma, T* dv1, const AttnShape& s,
                   const MixSpa<T>& spa, void* workspace, cudaStream_t stream) {
  check_shape(s);
  VT_CUDA_REQUIRE((spa.centre == nullptr) == (spa.dcentre == nullptr),
                  "a given centring term needs its gradient output, and only then");
  VT_CUDA_REQUIRE(workspace != nullptr, "shaped attention backward needs a workspace");
  const int64_t W = s.window < s.T ? s.window : s.T;
  double* ws = static_cast<double*>(workspace);
  VT_LAUNCH(mix_bwd_kernel<T>, blocks_for(s), threads_for(s), 0, stream, dout, soft, v, alpha, beta,
            gamma, lam, spa.rowscale, spa.centre, dsoft, dv, dv1, spa.dcentre, ws, s.B, s.T,
            int(s.H), int(s.Hkv), int(s.hd), W);
  VT_CUDA_CHECK(cudaGetLastError());
  if (dalpha || dbeta || dgamma) {
    VT_LAUNCH(mix_reduce_kernel, unsigned((s.H + 63) / 64), 64, 0, stream, ws, dalpha, dbeta,
              dgamma, s.B, int(s.H), int(s.Hkv), int(s.hd), chunking(s.T).chunks);
    VT_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

size_t attention_mix_workspace_bytes(const AttnShape& s) {
  // Per (batch, KV head, channel) column and sequence chunk: group x 3 partials.
  return sizeof(double) * size_t(s.B) * size_t(s.H) * size_t(s.hd) * 3 *
         size_t(chunking(s.T).chunks);
}

void attention_mix_forward(const float* soft, const float* v, const float* v1,
                           const float* alpha, const float* beta, const float* gamma, float lam,
                           float* out, const AttnShape& s, const MixSpa<float>& spa,
                           cudaStream_t stream) {
  forward_impl(soft, v, v1, alpha, beta, gamma, lam, out, s, spa, stream);
}
void attention_mix_forward(const __nv_bfloat16* soft, const __nv_bfloat16* v,
                           const __nv_bfloat16* v1, const float* alpha, const float* beta,
                           const float* gamma, float lam, __nv_bfloat16* out, const AttnShape& s,
                           const MixSpa<__nv_bfloat16>& spa, cudaStream_t stream) {
  forward_impl(soft, v, v1, alpha, beta, gamma, lam, out, s, spa, stream);
}

void attention_mix_backward(const float* dout, const float* soft, const float* v,
                            const float* alpha, const float* beta, const float* gamma, float lam,
                            float* dsoft, float* dv, float* dalpha, float* dbeta, float* dgamma,
                            float* dv1, const AttnShape& s, const MixSpa<float>& spa,
                            void* workspace, cudaStream_t stream) {
  backward_impl(dout, soft, v, alpha, beta, gamma, lam, dsoft, dv, dalpha, dbeta, dgamma, dv1, s,
                spa, workspace, stream);
}
void attention_mix_backward(const __nv_bfloat16* dout, const __nv_bfloat16* soft,
                            const __nv_bfloat16* v, const float* alpha, const float* beta,
                            const float* gamma, float lam, __nv_bfloat16* dsoft,
                            __nv_bfloat16* dv, float* dalpha, float* dbeta, float* dgamma,
                            __nv_bfloat16* dv1, const AttnShape& s,
                            const MixSpa<__nv_bfloat16>& spa, void* workspace,
                            cudaStream_t stream) {
  backward_impl(dout, soft, v, alpha, beta, gamma, lam, dsoft, dv, dalpha, dbeta, dgamma, dv1, s,
                spa, workspace, stream);
}

}  // namespace vt::cuda
