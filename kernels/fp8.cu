// FP8 quantization kernels (see fp8.cuh), all 16-byte vectorized with grids of at most one wave
// of the device's SMs (kernels/vec_access.cuh):
//   - amax: chunks of 8 elements (one or two 16-byte loads), a warp max of |x|'s bits, one
//     atomicMax a warp. It reads the matrix as stored whether or not the GEMM reads it
//     transposed: the largest magnitude does not depend on the order.
//   - quantize, not transposed: chunks of 8 elements in, 8 codes (8 bytes) out.
//   - quantize, transposed: 64 x 64 tiles through shared memory, the stored rows read in 16-byte
//     words and the transposed rows written 8 codes at a time; optionally also the codes in the
//     stored layout from the same read (a weight's two layouts in one pass).
// Each derives the scale from the amax with core/fp8.h's fp8_scale (the function the CPU backend
// calls) and converts with cuda_fp8.h's __nv_cvt_float_to_fp8 (__NV_SATFINITE: one
// cvt.rn.satfinite on sm_90). Quantization is elementwise, so the codes and counts do not depend
// on the vectorization or the tiling: the CPU's fake quantization sees the same values.
#include "kernels/fp8.cuh"

#include <cuda_fp8.h>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = detail::kElementwiseThreads;
constexpr int kChunk = 8;   // elements a thread moves at once (16 bytes of bf16, 32 of f32)
constexpr int kTile = 64;   // the transposing kernel's tile (kTile x kTile elements)
constexpr int kTilePad = 8;  // bytes after each shared tile row (keeps rows 8-byte aligned)

__device__ __forceinline__ bool aligned8(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 7u) == 0;
}

// One value's code, with the saturation and underflow counts.
struct Quantizer {
  float scale, mx;
  __nv_fp8_interpretation_t interp;
  unsigned long long saturated = 0, underflow = 0;

  __device__ void init(const Fp8QuantState* st, Fp8Format format) {
    scale = fp8_scale(__uint_as_float(st->amax_bits), format);
    mx = fp8_max(format);
    interp = format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  }

  __device__ __forceinline__ uint8_t operator()(float x) {
    const float y = x * scale;  // exact (a power of two) unless it leaves fp32's range
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(y, __NV_SATFINITE, interp);
    saturated += fabsf(y) > mx ? 1 : 0;
    underflow += (x != 0.0f && (q & 0x7f) == 0) ? 1 : 0;
    return q;
  }

  // The block's first thread publishes the scale; every thread adds its counts.
  __device__ void finish(Fp8QuantState* st, unsigned long long* tally, bool first) const {
    if (first) {
      st->scale = scale;
      st->scale_inv = 1.0f / scale;  // exact: a power of two (NaN stays NaN)
    }
    if (saturated) atomicAdd(&st->saturated, saturated);
    if (underflow) atomicAdd(&st->underflow, underflow);
    if (tally && saturated) atomicAdd(&tally[0], saturated);
    if (tally && underflow) atomicAdd(&tally[1], underflow);
  }
};

// The 8 codes of a chunk stored at p: one 8-byte store when `vec`, else the first n bytes.
__device__ __forceinline__ void store_codes(uint8_t* p, bool vec, int n,
                                            const uint8_t (&q)[kChunk]) {
  if (vec) {
    uint2 u;
    __builtin_memcpy(&u, q, sizeof(u));
    *reinterpret_cast<uint2*>(p) = u;
  } else {
    for (int k = 0; k < kChunk; ++k)
      if (k < n) p[k] = q[k];
  }
}

// The stored matrix as chunks of kChunk along its rows: chunk q is row q / per_row, columns from
// (q % per_row) * kChunk, count min(kChunk, cols - that).
struct Chunks {
  int64_t rows, cols, ld, per_row;
  __device__ __forceinline__ int64_t total() const { return rows * per_row; }
  __device__ __forceinline__ void at(int64_t q, int64_t* r, int64_t* c, int* n) const {
    *r = q / per_row;
    *c = (q - *r * per_row) * kChunk;
    const int64_t left = cols - *c;
    *n = left < kChunk ? int(left) : kChunk;
  }
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const T* src, Chunks ch, bool vec, Fp8QuantState* st) {
  unsigned m = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < ch.total(); q += stride) {
    int64_t r, c;
    int n;
    ch.at(q, &r, &c, &n);
    float f[kChunk];
    detail::load_chunk<kChunk>(src + r * ch.ld + c, vec && n == kChunk, n, f);  // pads with 0
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const unsigned bits = __float_as_uint(fabsf(f[k]));  // bit order is value order, NaN highest
      m = bits > m ? bits : m;
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const unsigned o = __shfl_xor_sync(0xffffffffu, m, off);
    m = o > m ? o : m;
  }
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(&st->amax_bits, m);
}

// codes[r * cols + c] = FP8(x(r, c)), the stored layout.
template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* src, Chunks ch, bool vec, Fp8Format format, uint8_t* codes,
                    Fp8QuantState* st, unsigned long long* tally) {
  Quantizer qz;
  qz.init(st, format);
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t q = first; q < ch.total(); q += stride) {
    int64_t r, c;
    int n;
    ch.at(q, &r, &c, &n);
    float f[kChunk];
    const bool full = vec && n == kChunk;
    detail::load_chunk<kChunk>(src + r * ch.ld + c, full, n, f);
    uint8_t out[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) out[k] = k < n ? qz(f[k]) : 0;
    store_codes(codes + r * ch.cols + c, full, n, out);
  }
  qz.finish(st, tally, first == 0);
}

// codes_t[c * rows + r] = FP8(x(r, c)) (the transpose, K-contiguous for the "TN" GEMM), and when
// codes is set also codes[r * cols + c]. Tile (tr, tc) covers stored rows tr*kTile.. and columns
// tc*kTile..; each thread quantizes two chunks of a stored row into the shared tile, then writes
// two 8-code chunks of a transposed row.
template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_transposed_kernel(const T* src, int64_t rows, int64_t cols, int64_t ld, bool vec,
                               Fp8Format format, uint8_t* codes_t, uint8_t* codes,
                               Fp8QuantState* st, unsigned long long* tally) {
  __shared__ uint8_t tile[kTile][kTile + kTilePad];
  Quantizer qz;
  qz.init(st, format);
  const int64_t tiles_c = (cols + kTile - 1) / kTile;
  const int64_t tiles = (rows + kTile - 1) / kTile * tiles_c;
  constexpr int kPerRow = kTile / kChunk;  // chunks in a tile row
  const bool vec_t = rows % kChunk == 0 && aligned8(codes_t);
  const bool vec_c = codes != nullptr && cols % kChunk == 0 && aligned8(codes);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / tiles_c * kTile, c0 = t % tiles_c * kTile;
    for (int i = threadIdx.x; i < kTile * kPerRow; i += blockDim.x) {
      const int tr = i / kPerRow, tc = i % kPerRow * kChunk;
      const int64_t r = r0 + tr, c = c0 + tc;
      uint8_t out[kChunk] = {};
      if (r < rows && c < cols) {
        const int n = cols - c < kChunk ? int(cols - c) : kChunk;
        float f[kChunk];
        detail::load_chunk<kChunk>(src + r * ld + c, vec && n == kChunk, n, f);
#pragma unroll
        for (int k = 0; k < kChunk; ++k) out[k] = k < n ? qz(f[k]) : 0;
        if (codes) store_codes(codes + r * cols + c, vec_c && n == kChunk, n, out);
      }
#pragma unroll
      for (int k = 0; k < kChunk; ++k) tile[tr][tc + k] = out[k];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * kPerRow; i += blockDim.x) {
      // Transposed row tc, its 8 codes from stored rows tr.. of the tile.
      const int tc = i / kPerRow, tr = i % kPerRow * kChunk;
      const int64_t c = c0 + tc, r = r0 + tr;
      if (c >= cols || r >= rows) continue;
      const int n = rows - r < kChunk ? int(rows - r) : kChunk;
      uint8_t out[kChunk];
#pragma unroll
      for (int k = 0; k < kChunk; ++k) out[k] = tile[tr + k][tc];
      store_codes(codes_t + c * rows + r, vec_t && n == kChunk, n, out);
    }
    __syncthreads();
  }
  qz.finish(st, tally, blockIdx.x == 0 && threadIdx.x == 0);
}

__global__ void reuse_kernel(const Fp8QuantState* cached, Fp8QuantState* st,
                             unsigned long long* tally) {
  *st = *cached;
  if (tally) {
    tally[0] += cached->saturated;
    tally[1] += cached->underflow;
  }
}

// 16-byte loads of every full chunk are possible: the base aligned and each row starting on a
// word (a contiguous matrix is one row).
template <class T>
bool vec_ok(const T* src, int64_t rows, int64_t ld) {
  return detail::aligned16(src) && (rows == 1 || ld % detail::kVec<T> == 0);
}

// The stored matrix's chunks; a contiguous one is one long row (no short chunk per row).
Chunks chunks(int64_t rows, int64_t cols, int64_t ld) {
  if (ld == cols) return Chunks{1, rows * cols, rows * cols, (rows * cols + kChunk - 1) / kChunk};
  return Chunks{rows, cols, ld, (cols + kChunk - 1) / kChunk};
}

template <class T>
void amax(const T* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
          Fp8QuantState* st, cudaStream_t stream) {
  if (rows * cols == 0) return;
  // The stored matrix: (cols, rows) when the GEMM reads the transpose.
  const Chunks ch = transposed ? chunks(cols, rows, ld) : chunks(rows, cols, ld);
  auto* kernel = &amax_kernel<T>;
  VT_LAUNCH(kernel, grid_for_sms(ch.rows * ch.per_row, kThreads, detail::kElementwiseBlocksPerSm),
            kThreads, 0, stream, src, ch, vec_ok(src, ch.rows, ch.ld), st);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void quantize_transposed(const T* src, int64_t srows, int64_t scols, int64_t ld, Fp8Format format,
                         uint8_t* codes_t, uint8_t* codes, Fp8QuantState* st, cudaStream_t stream,
                         unsigned long long* tally) {
  const int64_t tiles = ((srows + kTile - 1) / kTile) * ((scols + kTile - 1) / kTile);
  auto* kernel = &quantize_transposed_kernel<T>;
  VT_LAUNCH(kernel, grid_for_sms(tiles > 0 ? tiles * kThreads : 1, kThreads,
                                 detail::kElementwiseBlocksPerSm),
            kThreads, 0, stream, src, srows, scols, ld, vec_ok(src, srows, ld), format, codes_t,
            codes, st, tally);
  VT_CUDA_CHECK_LAUNCH();
}

template <class T>
void quantize(const T* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
              Fp8Format format, uint8_t* codes, Fp8QuantState* st, cudaStream_t stream,
              unsigned long long* tally) {
  if (transposed)  // the stored matrix is (cols, rows); codes is its transpose
    return quantize_transposed(src, cols, rows, ld, format, codes, static_cast<uint8_t*>(nullptr),
                               st, stream, tally);
  const Chunks ch = chunks(rows, cols, ld);
  const bool vec = vec_ok(src, ch.rows, ch.ld) && (ch.rows == 1 || cols % kChunk == 0) &&
                   (reinterpret_cast<uintptr_t>(codes) & 7u) == 0;
  auto* kernel = &quantize_kernel<T>;
  const int64_t work = ch.rows * ch.per_row;
  VT_LAUNCH(kernel, grid_for_sms(work > 0 ? work : 1, kThreads, detail::kElementwiseBlocksPerSm),
            kThreads, 0, stream, src, ch, vec, format, codes, st, tally);
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
void fp8_quantize_both(const float* src, int64_t rows, int64_t cols, int64_t ld,
                       Fp8Format format, uint8_t* codes, uint8_t* codes_t, Fp8QuantState* st,
                       cudaStream_t stream, unsigned long long* tally) {
  quantize_transposed(src, rows, cols, ld, format, codes_t, codes, st, stream, tally);
}
void fp8_quantize_both(const __nv_bfloat16* src, int64_t rows, int64_t cols, int64_t ld,
                       Fp8Format format, uint8_t* codes, uint8_t* codes_t, Fp8QuantState* st,
                       cudaStream_t stream, unsigned long long* tally) {
  quantize_transposed(src, rows, cols, ld, format, codes_t, codes, st, stream, tally);
}
void fp8_reuse(const Fp8QuantState* cached, Fp8QuantState* st, cudaStream_t stream,
               unsigned long long* tally) {
  VT_LAUNCH(reuse_kernel, 1, 1, 0, stream, cached, st, tally);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace vt::cuda
