// Cross-entropy kernels (see xent.cuh). Forward: one block per row, two passes over the row
// (max of z, then sum of exp(z - max)) with fp32 block reductions; z is recomputed rather than
// stored. Backward: elementwise over (N, ld). Templated on the logits type (f32 / bf16, read
// as fp32) and the dlogits type (written rounded to nearest even for bf16). The slice-combining
// pieces (rescale, finish) are elementwise over the rows. The fused loss end (xent_loss_grad,
// for an unsharded vocabulary) does forward, finish and backward in one kernel a row.
#include "kernels/xent.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"

namespace vt::cuda {
namespace {

using detail::block_max;
using detail::block_sum;
using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

template <class TL>
__global__ void xent_forward_kernel(const TL* logits, int64_t ld, int64_t n_valid,
                                    int64_t col_offset, const int32_t* targets, float cap,
                                    float inv_cap, float* row_max, float* row_sumexp,
                                    float* target_z) {
  const int64_t n = blockIdx.x;
  const TL* l = logits + n * ld;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < n_valid; c += blockDim.x)
    mx = detail::nan_max(mx, cap * tanhf(to_f32(l[c]) * inv_cap));
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < n_valid; c += blockDim.x)
    sum += expf(cap * tanhf(to_f32(l[c]) * inv_cap) - mx);
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    row_max[n] = mx;
    row_sumexp[n] = sum;
    const int64_t tc = static_cast<int64_t>(targets[n]) - col_offset;
    target_z[n] = (tc >= 0 && tc < n_valid) ? cap * tanhf(to_f32(l[tc]) * inv_cap) : 0.0f;
  }
}

// dloss == nullptr: every row's gradient is dloss_scalar.
template <class TL, class TD>
__global__ void xent_backward_kernel(const TL* logits, int64_t N, int64_t ld, int64_t n_valid,
                                     int64_t col_offset, const int32_t* targets, float cap,
                                     float inv_cap, const float* lse, const float* dloss,
                                     float dloss_scalar, TD* dlogits) {
  const int64_t total = N * ld;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / ld, c = i % ld;
    if (c >= n_valid) {
      dlogits[i] = from_f32<TD>(0.0f);
      continue;
    }
    const float th = tanhf(to_f32(logits[i]) * inv_cap);
    const float p = expf(cap * th - lse[n]);
    const bool is_target = static_cast<int64_t>(targets[n]) - col_offset == c;
    const float g = dloss != nullptr ? dloss[n] : dloss_scalar;
    dlogits[i] = from_f32<TD>(g * (p - (is_target ? 1.0f : 0.0f)) * (1.0f - th * th));
  }
}

// One block (kLossGradThreads) per row. Pass 1: each thread keeps a running max m and sum
// s = sum exp(z - m) over its columns (rescaled when the max moves), the block combines them
// (block_max, then block_sum of s * exp(m - M)). Pass 2 re-reads the row, which the block has
// just read (L1/L2: 1024 threads a block keep at most two rows an SM in flight), and writes the
// gradient; in place each thread writes only the columns it reads, after the target's z was
// taken (before the reductions' barriers). A NaN z makes s NaN, so lse, loss and the row's
// gradient are NaN as with the unfused kernels.
template <class TL, class TD>
__global__ void __launch_bounds__(1024)
    xent_loss_grad_kernel(const TL* logits, int64_t ld, int64_t n_valid, int64_t col_offset,
                          const int32_t* targets, float cap, float inv_cap, float grad_scale,
                          float* lse, float* loss, TD* dlogits) {
  const int64_t n = blockIdx.x;
  const TL* l = logits + n * ld;
  TD* d = dlogits + n * ld;
  const int64_t tc = static_cast<int64_t>(targets[n]) - col_offset;
  const bool local = tc >= 0 && tc < n_valid;
  float target_z = 0.0f;
  if (threadIdx.x == 0 && local) target_z = cap * tanhf(to_f32(l[tc]) * inv_cap);
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < n_valid; c += blockDim.x) {
    const float z = cap * tanhf(to_f32(l[c]) * inv_cap);
    if (z > m) {
      s = s * expf(m - z) + 1.0f;
      m = z;
    } else {
      s += expf(z - m);
    }
  }
  const float mx = block_max(m);
  const float sum = block_sum(m == -INFINITY ? s : s * expf(m - mx));
  const float row_lse = mx + logf(sum);
  if (threadIdx.x == 0) {
    lse[n] = row_lse;
    loss[n] = row_lse - target_z;
  }
  for (int64_t c = threadIdx.x; c < ld; c += blockDim.x) {
    float g = 0.0f;
    if (c < n_valid) {
      const float th = tanhf(to_f32(l[c]) * inv_cap);
      g = grad_scale * (expf(cap * th - row_lse) - (c == tc ? 1.0f : 0.0f)) * (1.0f - th * th);
    }
    d[c] = from_f32<TD>(g);
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
            n_valid, col_offset, targets, cap, 1.0f / cap, row_max, row_sumexp, target_z);
  VT_CUDA_CHECK_LAUNCH();
}

template <class TL, class TD>
void backward(const TL* logits, int64_t N, int64_t ld, int64_t n_valid, int64_t col_offset,
              const int32_t* targets, float cap, const float* lse, const float* dloss,
              float dloss_scalar, TD* dlogits, cudaStream_t stream) {
  check_args(ld, n_valid, cap);
  if (N * ld == 0) return;
  auto* xent_backward = &xent_backward_kernel<TL, TD>;  // no comma in a macro argument
  VT_LAUNCH(xent_backward, grid_for(N * ld, kThreads), kThreads, 0, stream, logits, N, ld, n_valid,
            col_offset, targets, cap, 1.0f / cap, lse, dloss, dloss_scalar, dlogits);
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
            col_offset, targets, cap, 1.0f / cap, grad_scale, lse, loss, dlogits);
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
