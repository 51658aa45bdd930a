// Value-mixing kernels (see value_mix.cuh): the linear mixes and the gated mix are elementwise
// grid-stride loops over chunks of 8 (bf16) or 4 (f32) elements moved in 16-byte words, the grid
// one wave of 256-thread blocks (kernels/vec_access.cuh; a scalar path for unaligned operands and
// the tail); the gated backward uses one thread per (row, head) looping over hd for the gate
// gradient.
#include "kernels/value_mix.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::for_each_chunk;
using detail::from_f32;
using detail::kVec;
using detail::load_chunk;
using detail::store_chunk;
using detail::to_f32;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = detail::kElementwiseBlocksPerSm;
static_assert(kThreads == detail::kElementwiseThreads, "elementwise_grid sizes for this block");

#define VT_GRID_STRIDE(i, n)                                                                 \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// v = a x (+ b y when y is not null).
template <class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    mix2_kernel(float a, const T* x, float b, const T* y, T* v, int64_t n, bool vec) {
  constexpr int W = kVec<T>;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float r[W], t[W];
    load_chunk<W>(x + i, wide, count, r);
#pragma unroll
    for (int e = 0; e < W; ++e) r[e] = a * r[e];
    if (y != nullptr) {
      load_chunk<W>(y + i, wide, count, t);
#pragma unroll
      for (int e = 0; e < W; ++e) r[e] += b * t[e];
    }
    store_chunk<W>(v + i, wide, count, r);
  });
}

// v += a x.
template <class T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    axpy_kernel(float a, const T* x, T* v, int64_t n, bool vec) {
  constexpr int W = kVec<T>;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float r[W], t[W];
    load_chunk<W>(v + i, wide, count, r);
    load_chunk<W>(x + i, wide, count, t);
#pragma unroll
    for (int e = 0; e < W; ++e) r[e] = r[e] + a * t[e];
    store_chunk<W>(v + i, wide, count, r);
  });
}

__global__ void gate_sigmoid_kernel(float* z, int64_t n, float gate_scale) {
  VT_GRID_STRIDE(i, n) { z[i] = gate_scale / (1.0f + expf(-z[i])); }
}

template <class T>
__global__ void gate_sigmoid_backward_kernel(const float* gate, const float* dgate,
                                             float gate_scale, T* dz, int64_t n) {
  VT_GRID_STRIDE(i, n) {
    const float g = gate[i];
    const float q = g / gate_scale;  // fp32, as on the CPU (float / float)
    const double r = static_cast<double>(dgate[i]) * static_cast<double>(g) *
                     (1.0 - static_cast<double>(q));
    dz[i] = from_f32<T>(static_cast<float>(r));
  }
}

// v = ctx + gate[head] emb. `vec` also requires hd % W == 0: a chunk then lies in one head and
// takes one gate; on the scalar path each element finds its own (a 64-bit division each: the
// heavy register budget).
template <class T>
__global__ void __launch_bounds__(kThreads, detail::kHeavyBlocksPerSm)
    gated_mix_kernel(const T* ctx, const T* emb, const float* gate, T* v, int64_t n, int64_t hd,
                     bool vec) {
  constexpr int W = kVec<T>;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float c[W], m[W];
    load_chunk<W>(ctx + i, wide, count, c);
    load_chunk<W>(emb + i, wide, count, m);
    if (wide) {
      const float g = gate[i / hd];
#pragma unroll
      for (int e = 0; e < W; ++e) c[e] = c[e] + g * m[e];
    } else {
#pragma unroll
      for (int e = 0; e < W; ++e)
        if (e < count) c[e] = c[e] + gate[(i + e) / hd] * m[e];
    }
    store_chunk<W>(v + i, wide, count, c);
  });
}

template <class T>
__global__ void gated_mix_backward_kernel(const T* dv, const T* emb, const float* gate, T* demb,
                                          float* dgate, int64_t NH, int64_t hd) {
  VT_GRID_STRIDE(rh, NH) {
    const float g = gate[rh];
    float acc = 0.0f;
    for (int64_t d = 0; d < hd; ++d) {
      const int64_t o = rh * hd + d;
      const float dvo = to_f32(dv[o]);
      acc += dvo * to_f32(emb[o]);
      demb[o] = from_f32<T>(g * dvo);
    }
    dgate[rh] = acc;
  }
}

#undef VT_GRID_STRIDE

template <class T>
void mix2(float a, const T* x, float b, const T* y, T* v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(x) && (y == nullptr || aligned16(y)) && aligned16(v);
  VT_LAUNCH(mix2_kernel<T>, detail::elementwise_grid(n, kVec<T>), kThreads, 0, stream, a, x, b, y,
            v, n, vec);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void axpy(float a, const T* x, T* v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(axpy_kernel<T>, detail::elementwise_grid(n, kVec<T>), kThreads, 0, stream, a, x, v, n,
            aligned16(x) && aligned16(v));
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void gate_backward(const float* gate, const float* dgate, float gate_scale, T* dz, int64_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(gate_sigmoid_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, gate,
            dgate, gate_scale, dz, n);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void gated(const T* ctx, const T* emb, const float* gate, T* v, int64_t N, int64_t heads,
           int64_t hd, cudaStream_t stream) {
  const int64_t n = N * heads * hd;
  if (n == 0) return;
  const bool vec = aligned16(ctx) && aligned16(emb) && aligned16(v) && hd % kVec<T> == 0;
  VT_LAUNCH(gated_mix_kernel<T>, detail::elementwise_grid(n, kVec<T>, detail::kHeavyBlocksPerSm),
            kThreads, 0, stream, ctx, emb, gate, v, n, hd, vec);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void gated_backward(const T* dv, const T* emb, const float* gate, T* demb, float* dgate,
                    int64_t N, int64_t heads, int64_t hd, cudaStream_t stream) {
  const int64_t NH = N * heads;
  if (NH == 0) return;
  VT_LAUNCH(gated_mix_backward_kernel<T>, grid_for(NH, kThreads), kThreads, 0, stream, dv, emb,
            gate, demb, dgate, NH, hd);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void value_mix2(float a, const float* x, float b, const float* y, float* v, int64_t n,
                cudaStream_t stream) {
  mix2(a, x, b, y, v, n, stream);
}
void value_mix2(float a, const __nv_bfloat16* x, float b, const __nv_bfloat16* y,
                __nv_bfloat16* v, int64_t n, cudaStream_t stream) {
  mix2(a, x, b, y, v, n, stream);
}
void value_axpy(float a, const float* x, float* v, int64_t n, cudaStream_t stream) {
  axpy(a, x, v, n, stream);
}
void value_axpy(float a, const __nv_bfloat16* x, __nv_bfloat16* v, int64_t n,
                cudaStream_t stream) {
  axpy(a, x, v, n, stream);
}
void value_gate_sigmoid(float* z, int64_t n, float gate_scale, cudaStream_t stream) {
  if (n == 0) return;
  VT_LAUNCH(gate_sigmoid_kernel, grid_for(n, kThreads), kThreads, 0, stream, z, n, gate_scale);
  VT_CUDA_CHECK_LAUNCH();
}
void value_gate_sigmoid_backward(const float* gate, const float* dgate, float gate_scale, float* dz,
                                 int64_t n, cudaStream_t stream) {
  gate_backward(gate, dgate, gate_scale, dz, n, stream);
}
void value_gate_sigmoid_backward(const float* gate, const float* dgate, float gate_scale,
                                 __nv_bfloat16* dz, int64_t n, cudaStream_t stream) {
  gate_backward(gate, dgate, gate_scale, dz, n, stream);
}
void value_gated_mix(const float* ctx, const float* emb, const float* gate, float* v, int64_t N,
                     int64_t heads, int64_t hd, cudaStream_t stream) {
  gated(ctx, emb, gate, v, N, heads, hd, stream);
}
void value_gated_mix(const __nv_bfloat16* ctx, const __nv_bfloat16* emb, const float* gate,
                     __nv_bfloat16* v, int64_t N, int64_t heads, int64_t hd, cudaStream_t stream) {
  gated(ctx, emb, gate, v, N, heads, hd, stream);
}
void value_gated_mix_backward(const float* dv, const float* emb, const float* gate, float* demb,
                              float* dgate, int64_t N, int64_t heads, int64_t hd,
                              cudaStream_t stream) {
  gated_backward(dv, emb, gate, demb, dgate, N, heads, hd, stream);
}
void value_gated_mix_backward(const __nv_bfloat16* dv, const __nv_bfloat16* emb,
                              const float* gate, __nv_bfloat16* demb, float* dgate, int64_t N,
                              int64_t heads, int64_t hd, cudaStream_t stream) {
  gated_backward(dv, emb, gate, demb, dgate, N, heads, hd, stream);
}

}  // namespace vt::cuda
