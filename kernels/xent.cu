// Cross-entropy kernels (see xent.cuh). Forward: one block per row, two passes over the row
// (max of z, then sum of exp(z - max)) with fp32 block reductions; z is recomputed rather than
// stored. Backward: elementwise over (N, ld). Templated on the logits type (f32 / bf16, read
// as fp32) and the dlogits type (written rounded to nearest even for bf16). The slice-combining
// pieces (rescale, finish) are elementwise over the rows. The fused loss end (xent_loss_grad,
// for an unsharded vocabulary) does forward, finish and backward in one kernel a row.
//
// Memory access: a row's columns in chunks of 8 (bf16 anywhere) or 4 (f32 only), chunk q of a
// row owned by thread q mod blockDim in every pass (the backward: grid-stride over the chunks),
// moved in 16-byte words where logits and dlogits are 16-byte aligned and ld a multiple of the
// chunk (kernels/vec_access.cuh); else the same chunks one element at a time.
#include "kernels/xent.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::block_max;
using detail::block_sum;
using detail::for_each_chunk;
using detail::from_f32;
using detail::load_chunk;
using detail::store_chunk;
using detail::to_f32;

constexpr int kThreads = 256;

// Elements of a chunk: one 16-byte word of the narrower of the two types.
template <class A, class B = A>
inline constexpr int kChunk = 16 / static_cast<int>(sizeof(A) < sizeof(B) ? sizeof(A) : sizeof(B));

// Row chunk q: its first column and how many of its W columns lie below `end` (0 past it).
template <int W>
__device__ __forceinline__ int chunk_count(int64_t q, int64_t end) {
  const int64_t c = q * W;
  return c >= end ? 0 : (end - c < W ? static_cast<int>(end - c) : W);
}

// 16-byte words: every pointer aligned and each row's start too (ld a multiple of the chunk).
template <int W>
bool rows_vec(const void* a, const void* b, int64_t ld) {
  return aligned16(a) && (b == nullptr || aligned16(b)) && ld % W == 0;
}

template <class TL>
__global__ void xent_forward_kernel(const TL* logits, int64_t ld, int64_t n_valid,
                                    int64_t col_offset, const int32_t* targets, float cap,
                                    float inv_cap, float* row_max, float* row_sumexp,
                                    float* target_z, bool vec) {
  constexpr int W = kChunk<TL>;
  const int64_t n = blockIdx.x;
  const TL* l = logits + n * ld;
  const int64_t chunks = (n_valid + W - 1) / W;
  float mx = -INFINITY;
  for (int64_t q = threadIdx.x; q < chunks; q += blockDim.x) {
    const int cnt = chunk_count<W>(q, n_valid);
    float z[W];
    load_chunk<W>(l + q * W, vec && cnt == W, cnt, z);
#pragma unroll
    for (int e = 0; e < W; ++e)
      if (e < cnt) mx = detail::nan_max(mx, cap * tanhf(z[e] * inv_cap));
  }
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t q = threadIdx.x; q < chunks; q += blockDim.x) {
    const int cnt = chunk_count<W>(q, n_valid);
    float z[W];
    load_chunk<W>(l + q * W, vec && cnt == W, cnt, z);
#pragma unroll
    for (int e = 0; e < W; ++e)
      if (e < cnt) sum += expf(cap * tanhf(z[e] * inv_cap) - mx);
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    row_max[n] = mx;
    row_sumexp[n] = sum;
    const int64_t tc = static_cast<int64_t>(targets[n]) - col_offset;
    target_z[n] = (tc >= 0 && tc < n_valid) ? cap * tanhf(to_f32(l[tc]) * inv_cap) : 0.0f;
  }
}

// dloss == nullptr: every row's gradient is dloss_scalar. Chunks of W columns never straddle
// rows on the 16-byte path (ld % W == 0: one row, one division a chunk); on the scalar path each
// element finds its row (64-bit divisions, tanhf, expf: the heavy register budget).
template <class TL, class TD>
__global__ void __launch_bounds__(kThreads, detail::kHeavyBlocksPerSm)
    xent_backward_kernel(const TL* logits, int64_t N, int64_t ld, int64_t n_valid,
                         int64_t col_offset, const int32_t* targets, float cap, float inv_cap,
                         const float* lse, const float* dloss, float dloss_scalar, TD* dlogits,
                         bool vec) {
  constexpr int W = kChunk<TL, TD>;
  const auto grad = [&](int64_t n, int64_t c, float logit) {
    if (c >= n_valid) return 0.0f;
    const float th = tanhf(logit * inv_cap);
    const float p = expf(cap * th - lse[n]);
    const bool is_target = static_cast<int64_t>(targets[n]) - col_offset == c;
    const float g = dloss != nullptr ? dloss[n] : dloss_scalar;
    return g * (p - (is_target ? 1.0f : 0.0f)) * (1.0f - th * th);
  };
  for_each_chunk<W>(N * ld, vec, [&](int64_t i, bool wide, int count) {
    float v[W];
    load_chunk<W>(logits + i, wide, count, v);
    if (wide) {
      const int64_t n = i / ld, c = i - n * ld;
#pragma unroll
      for (int e = 0; e < W; ++e) v[e] = grad(n, c + e, v[e]);
    } else {
#pragma unroll 1
      for (int e = 0; e < count; ++e) v[e] = grad((i + e) / ld, (i + e) % ld, v[e]);
    }
    store_chunk<W>(dlogits + i, wide, count, v);
  });
}

// One block (kLossGradThreads) per row. Pass 1: each thread keeps a running max m and sum
// s = sum exp(z - m) over its columns (rescaled when the max moves), the block combines them
// (block_max, then block_sum of s * exp(m - M)). Pass 2 re-reads the row, which the block has
// just read (L1/L2: 1024 threads a block keep at most two rows an SM in flight), and writes the
// gradient; in place each thread writes only the chunks it reads, after the target's z was
// taken (before the reductions' barriers). A NaN z makes s NaN, so lse, loss and the row's
// gradient are NaN as with the unfused kernels.
template <class TL, class TD>
__global__ void __launch_bounds__(1024)
    xent_loss_grad_kernel(const TL* logits, int64_t ld, int64_t n_valid, int64_t col_offset,
                          const int32_t* targets, float cap, float inv_cap, float grad_scale,
                          float* lse, float* loss, TD* dlogits, bool vec) {
  constexpr int W = kChunk<TL, TD>;
  const int64_t n = blockIdx.x;
  const TL* l = logits + n * ld;
  TD* d = dlogits + n * ld;
  const int64_t tc = static_cast<int64_t>(targets[n]) - col_offset;
  const bool local = tc >= 0 && tc < n_valid;
  float target_z = 0.0f;
  if (threadIdx.x == 0 && local) target_z = cap * tanhf(to_f32(l[tc]) * inv_cap);
  float m = -INFINITY, s = 0.0f;
  const int64_t valid_chunks = (n_valid + W - 1) / W;
  for (int64_t q = threadIdx.x; q < valid_chunks; q += blockDim.x) {
    const int cnt = chunk_count<W>(q, n_valid);
    float z[W];
    load_chunk<W>(l + q * W, vec && cnt == W, cnt, z);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      if (e >= cnt) break;
      const float ze = cap * tanhf(z[e] * inv_cap);
      if (ze > m) {
        s = fmaf(s, expf(m - ze), 1.0f);  // explicit, as nvcc contracts it: both paths alike
        m = ze;
      } else {
        s += expf(ze - m);
      }
    }
  }
  const float mx = block_max(m);
  const float sum = block_sum(m == -INFINITY ? s : s * expf(m - mx));
  const float row_lse = mx + logf(sum);
  if (threadIdx.x == 0) {
    lse[n] = row_lse;
    loss[n] = row_lse - target_z;
  }
  const int64_t chunks = (ld + W - 1) / W;
  for (int64_t q = threadIdx.x; q < chunks; q += blockDim.x) {
    const int cnt = chunk_count<W>(q, ld), valid = chunk_count<W>(q, n_valid);
    float v[W];
    load_chunk<W>(l + q * W, vec && cnt == W, valid, v);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      float g = 0.0f;
      if (e < valid) {
        const float th = tanhf(v[e] * inv_cap);
        g = grad_scale * (expf(cap * th - row_lse) - (q * W + e == tc ? 1.0f : 0.0f)) *
            (1.0f - th * th);
      }
      v[e] = g;
    }
    store_chunk<W>(d + q * W, vec && cnt == W, cnt, v);
  }
}

__global__ void xent_rescale_kernel(float* row_sumexp, const float* row_max,
                                    const float* global_max, int64_t N) {
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    row_sumexp[n] *= expf(row_max[n] - global_max[n]);
}

__global__ void xent_finish_kernel(const float* row_max, const float* row_sumexp,
                                   const float* target_z, float* lse, float* loss, int64_t N) {
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float l = row_max[n] + logf(row_sumexp[n]);
    lse[n] = l;
    loss[n] = l - target_z[n];
  }
}

void check_args(int64_t ld, int64_t n_valid, float cap) {
  if (n_valid < 0 || n_valid > ld || !(cap > 0.0f))
    cuda_fail(cudaErrorInvalidValue, "xent: need 0 <= n_valid <= ld and cap > 0", __FILE__,
              __LINE__);
}

template <class TL>
void forward(const TL* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
             const int32_t* targets, float cap, float* row_max, float* row_sumexp,
             float* target_z, cudaStream_t stream) {
  check_args(ld, n_valid, cap);
  if (N == 0) return;
  // One block per row: gridDim.x allows 2^31 - 1 rows.
  VT_LAUNCH(xent_forward_kernel<TL>, static_cast<unsigned>(N), kThreads, 0, stream, logits, ld,
            n_valid, col_offset, targets, cap, 1.0f / cap, row_max, row_sumexp, target_z,
            rows_vec<kChunk<TL>>(logits, nullptr, ld));
  VT_CUDA_CHECK_LAUNCH();
}

template <class TL, class TD>
void backward(const TL* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
              const int32_t* targets, float cap, const float* lse, const float* dloss,
              float dloss_scalar, TD* dlogits, cudaStream_t stream) {
  check_args(ld, n_valid, cap);
  if (N * ld == 0) return;
  auto* xent_backward = &xent_backward_kernel<TL, TD>;  // no comma in a macro argument
  constexpr int W = kChunk<TL, TD>;
  VT_LAUNCH(xent_backward, detail::elementwise_grid(N * ld, W, detail::kHeavyBlocksPerSm),
            kThreads, 0, stream, logits, N, ld, n_valid, col_offset, targets, cap, 1.0f / cap, lse,
            dloss, dloss_scalar, dlogits, rows_vec<W>(logits, dlogits, ld));
  VT_CUDA_CHECK_LAUNCH();
}

constexpr int kLossGradThreads = 1024;

template <class TL, class TD>
void loss_grad(const TL* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
               const int32_t* targets, float cap, float grad_scale, float* lse, float* loss,
               TD* dlogits, cudaStream_t stream) {
  check_args(ld, n_valid, cap);
  if (N == 0) return;
  auto* kernel = &xent_loss_grad_kernel<TL, TD>;  // no comma in a macro argument
  // One block per row: gridDim.x allows 2^31 - 1 rows.
  VT_LAUNCH(kernel, static_cast<unsigned>(N), kLossGradThreads, 0, stream, logits, ld, n_valid,
            col_offset, targets, cap, 1.0f / cap, grad_scale, lse, loss, dlogits,
            rows_vec<kChunk<TL, TD>>(logits, dlogits, ld));
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void xent_loss_grad(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, float* dlogits, cudaStream_t stream) {
  loss_grad(logits, N, ld, n_valid, col_offset, targets, cap, grad_scale, lse, loss, dlogits,
            stream);
}
void xent_loss_grad(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, __nv_bfloat16* dlogits, cudaStream_t stream) {
  loss_grad(logits, N, ld, n_valid, col_offset, targets, cap, grad_scale, lse, loss, dlogits,
            stream);
}
void xent_loss_grad(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, float* dlogits, cudaStream_t stream) {
  loss_grad(logits, N, ld, n_valid, col_offset, targets, cap, grad_scale, lse, loss, dlogits,
            stream);
}
void xent_loss_grad(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                    int64_t col_offset, const int32_t* targets, float cap, float grad_scale,
                    float* lse, float* loss, __nv_bfloat16* dlogits, cudaStream_t stream) {
  loss_grad(logits, N, ld, n_valid, col_offset, targets, cap, grad_scale, lse, loss, dlogits,
            stream);
}

void xent_partial_forward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, float* row_max,
                          float* row_sumexp, float* target_z, cudaStream_t stream) {
  forward(logits, N, ld, n_valid, col_offset, targets, cap, row_max, row_sumexp, target_z,
          stream);
}
void xent_partial_forward(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                          int64_t col_offset, const int32_t* targets, float cap, float* row_max,
                          float* row_sumexp, float* target_z, cudaStream_t stream) {
  forward(logits, N, ld, n_valid, col_offset, targets, cap, row_max, row_sumexp, target_z,
          stream);
}

void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   const float* dloss, float* dlogits, cudaStream_t stream) {
  backward(logits, N, ld, n_valid, col_offset, targets, cap, lse, dloss, 0.0f, dlogits, stream);
}
void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, float* dlogits, cudaStream_t stream) {
  backward(logits, N, ld, n_valid, col_offset, targets, cap, lse, nullptr, grad_scale, dlogits,
           stream);
}
void xent_backward(const float* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, __nv_bfloat16* dlogits, cudaStream_t stream) {
  backward(logits, N, ld, n_valid, col_offset, targets, cap, lse, nullptr, grad_scale, dlogits,
           stream);
}
void xent_backward(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, float* dlogits, cudaStream_t stream) {
  backward(logits, N, ld, n_valid, col_offset, targets, cap, lse, nullptr, grad_scale, dlogits,
           stream);
}
void xent_backward(const __nv_bfloat16* logits, int64_t N, int64_t ld, int64_t n_valid,
                   int64_t col_offset, const int32_t* targets, float cap, const float* lse,
                   float grad_scale, __nv_bfloat16* dlogits, cudaStream_t stream) {
  backward(logits, N, ld, n_valid, col_offset, targets, cap, lse, nullptr, grad_scale, dlogits,
           stream);
}

void xent_rescale(float* row_sumexp, const float* row_max, const float* global_max, int64_t N,
                  cudaStream_t stream) {
  if (N == 0) return;
  VT_LAUNCH(xent_rescale_kernel, grid_for(N, kThreads), kThreads, 0, stream, row_sumexp, row_max,
            global_max, N);
  VT_CUDA_CHECK_LAUNCH();
}

void xent_finish(const float* row_max, const float* row_sumexp, const float* target_z,
                 float* lse, float* loss, int64_t N, cudaStream_t stream) {
  if (N == 0) return;
  VT_LAUNCH(xent_finish_kernel, grid_for(N, kThreads), kThreads, 0, stream, row_max, row_sumexp,
            target_z, lse, loss, N);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
