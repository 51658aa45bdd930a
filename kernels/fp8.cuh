// FP8 quantization on the GPU for the FP8 GEMMs (core/ops/gemm.h): the amax of a matrix, then
// its codes in E4M3 or E5M2 with the power-of-two scale core/fp8.h derives from that amax,
// written row-major and K-contiguous (transposing when asked: Hopper's FP8 GEMMs take only the
// "TN" layout), with the dequantization factor and saturation/underflow counts; a weight's two
// layouts from one read (fp8_quantize_both), and a cached quantization's state reused. Device
// pointers; stream-ordered, no host synchronization. 16-byte accesses, one wave of the SMs.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "core/fp8.h"

namespace vt::cuda {

// Per-tensor quantization state, in device memory, zeroed (cudaMemsetAsync) before fp8_amax.
struct Fp8QuantState {
  unsigned amax_bits;       // bits of max |x| (NaN, above +inf's bits, wins)
  float scale;              // codes = round(x * scale)
  float scale_inv;          // the dequantization factor (cuBLASLt's A/B scale)
  unsigned pad;
  unsigned long long saturated;  // |x * scale| > the format's max (clamped; NaN not counted)
  unsigned long long underflow;  // x != 0 whose code is +-0
};

// The source: element (r, c) of a rows x cols matrix is src[r * ld + c], or src[c * ld + r]
// when `transposed` (the matrix is the transpose of the stored one).
// amax of the matrix into st->amax_bits (atomic max: call once per state after zeroing it).
void fp8_amax(const float* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
              Fp8QuantState* st, cudaStream_t stream);
void fp8_amax(const __nv_bfloat16* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
              Fp8QuantState* st, cudaStream_t stream);
// codes[r * cols + c] = FP8(x(r, c) * scale), round to nearest even, saturating
// (cvt.rn.satfinite); fills scale, scale_inv and the counts. After fp8_amax on the same state.
// tally (device, nullable): the saturated and underflow counts are also added to tally[0], [1].
void fp8_quantize(const float* src, int64_t rows, int64_t cols, int64_t ld, bool transposed,
                  Fp8Format format, uint8_t* codes, Fp8QuantState* st, cudaStream_t stream,
                  unsigned long long* tally = nullptr);
void fp8_quantize(const __nv_bfloat16* src, int64_t rows, int64_t cols, int64_t ld,
                  bool transposed, Fp8Format format, uint8_t* codes, Fp8QuantState* st,
                  cudaStream_t stream, unsigned long long* tally = nullptr);

// Both layouts of the rows x cols matrix src[r * ld + c] from one read (a weight: the forward
// GEMM reads W^T, the data gradient W, both E4M3 with the one scale of W's amax):
// codes[r * cols + c] and codes_t[c * rows + r]. After fp8_amax(src, rows, cols, ld, false, st).
void fp8_quantize_both(const float* src, int64_t rows, int64_t cols, int64_t ld,
                       Fp8Format format, uint8_t* codes, uint8_t* codes_t, Fp8QuantState* st,
                       cudaStream_t stream, unsigned long long* tally = nullptr);
void fp8_quantize_both(const __nv_bfloat16* src, int64_t rows, int64_t cols, int64_t ld,
                       Fp8Format format, uint8_t* codes, uint8_t* codes_t, Fp8QuantState* st,
                       cudaStream_t stream, unsigned long long* tally = nullptr);
// *st = *cached (a quantization done earlier, its codes reused), and its counts added to tally
// (nullable) as if it had been quantized again: the metrics count per GEMM either way.
void fp8_reuse(const Fp8QuantState* cached, Fp8QuantState* st, cudaStream_t stream,
               unsigned long long* tally = nullptr);

}  // namespace vt::cuda
