// FP8 quantization kernels (see fp8.cuh): a grid-stride amax (warp max of |x|'s bits, one
// atomicMax a warp), and a grid-stride quantization that derives the scale from the amax with
// core/fp8.h's fp8_scale (the same function the CPU backend calls) and converts with
// cuda_fp8.h's __nv_cvt_float_to_fp8 (__NV_SATFINITE: one cvt.rn.satfinite on sm_90).
// The transposed read is strided (not tiled): correct, not yet tuned.
#include "kernels/fp8.cuh"

#include <cuda_fp8.h>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = detail::kElementwiseThreads;

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ inline float element(const T* src, int64_t i, int64_t cols, int64_t ld,
                                bool transposed) {
  const int64_t r = i / cols, c = i % cols;
  return to_float(transposed ? src[c * ld + r] : src[r * ld + c]);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const T* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
                Fp8QuantState* st) {
  const int64_t n = rows * cols;
  unsigned m = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float a = fabsf(element(src, i, cols, ld, transposed));
    const unsigned bits = __float_as_uint(a);  // |x| >= 0: bit order is value order, NaN highest
    m = bits > m ? bits : m;
  }
  for (int off = 16; off > 0; off /= 2) {
    const unsigned o = __shfl_xor_sync(0xffffffffu, m, off);
    m = o > m ? o : m;
  }
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(&st->amax_bits, m);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
                    Fp8Format format, uint8_t* codes, Fp8QuantState* st,
                    unsigned long long* tally) {
  const float amax = __uint_as_float(st->amax_bits);
  const float scale = fp8_scale(amax, format);
  const float mx = fp8_max(format);
  const __nv_fp8_interpretation_t interp = format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const int64_t n = rows * cols;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (first == 0) {
    st->scale = scale;
    st->scale_inv = 1.0f / scale;  // exact: a power of two (NaN stays NaN)
  }
  unsigned long long saturated = 0, underflow = 0;
  for (int64_t i = first; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = element(src, i, cols, ld, transposed);
    const float y = x * scale;  // exact (a power of two) unless it leaves fp32's range
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(y, __NV_SATFINITE, interp);
    codes[i] = q;
    if (fabsf(y) > mx) ++saturated;
    if (x != 0.0f && (q & 0x7f) == 0) ++underflow;
  }
  if (saturated) atomicAdd(&st->saturated, saturated);
  if (underflow) atomicAdd(&st->underflow, underflow);
  if (tally && saturated) atomicAdd(&tally[0], saturated);
  if (tally && underflow) atomicAdd(&tally[1], underflow);
}

unsigned grid_for(int64_t n) { return detail::elementwise_grid(n, 1); }

template <class T>
void amax(const T* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
          Fp8QuantState* st, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  auto* kernel = &amax_kernel<T>;
  VT_LAUNCH(kernel, grid_for(n), kThreads, 0, stream, src, rows, cols, ld, transposed, st);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void quantize(const T* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
              Fp8Format format, uint8_t* codes, Fp8QuantState* st, cudaStream_t stream,
              unsigned long long* tally) {
  const int64_t n = rows * cols;
  auto* kernel = &quantize_kernel<T>;
  VT_LAUNCH(kernel, grid_for(n > 0 ? n : 1), kThreads, 0, stream, src, rows, cols, ld,
            transposed, format, codes, st, tally);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_amax(const float* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
              Fp8QuantState* st, cudaStream_t stream) {
  amax(src, rows, cols, ld, transposed, st, stream);
}
void fp8_amax(const __nv_bfloat16* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
              Fp8QuantState* st, cudaStream_t stream) {
  amax(src, rows, cols, ld, transposed, st, stream);
}
void fp8_quantize(const float* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
                  Fp8Format format, uint8_t* codes, Fp8QuantState* st, cudaStream_t stream,
                  unsigned long long* tally) {
  quantize(src, rows, cols, ld, transposed, format, codes, st, stream, tally);
}
void fp8_quantize(const __nv_bfloat16* src, int64_t rows, int64_t cols, int64_t ld,
                  bool transposed, Fp8Format format, uint8_t* codes, Fp8QuantState* st,
                  cudaStream_t stream, unsigned long long* tally) {
  quantize(src, rows, cols, ld, transposed, format, codes, st, stream, tally);
}

}  // namespace vt::cuda
