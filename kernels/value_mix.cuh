// Value-path mixing of docs/model.md "Value paths" on the GPU (the elementwise parts of
// src/model/value_mix.cc): linear mixes of value sources and the value-embed gated mix, with
// their backward pieces. f32 or bf16 tensors, fp32 math; coefficients are host scalars. Device
// pointers.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace vt::cuda {

// v = a * x + b * y over n elements (y may be null: v = a * x). v may alias x or y.
void value_mix2(float a, const float* x, float b, const float* y, float* v, int64_t n,
                cudaStream_t stream);
void value_mix2(float a, const __nv_bfloat16* x, float b, const __nv_bfloat16* y,
                __nv_bfloat16* v, int64_t n, cudaStream_t stream);
// v += a * x (resformer-dense adds each earlier layer's value this way).
void value_axpy(float a, const float* x, float* v, int64_t n, cudaStream_t stream);
void value_axpy(float a, const __nv_bfloat16* x, __nv_bfloat16* v, int64_t n,
                cudaStream_t stream);

// gate (N, heads) = gate_scale * sigmoid(z), in place on z (z = gate_in W_g from a GEMM).
void value_gate_sigmoid(float* z, int64_t n, float gate_scale, cudaStream_t stream);
// v[r,h,d] = ctx[r,h,d] + gate[r,h] * emb[r,h,d]; ctx, emb, v: (N, heads, hd), gate (N, heads) fp32.
void value_gated_mix(const float* ctx, const float* emb, const float* gate, float* v, int64_t N,
                     int64_t heads, int64_t hd, cudaStream_t stream);
void value_gated_mix(const __nv_bfloat16* ctx, const __nv_bfloat16* emb, const float* gate,
                     __nv_bfloat16* v, int64_t N, int64_t heads, int64_t hd, cudaStream_t stream);
// Backward of the gate itself: dz[i] = dgate[i] * gate[i] * (1 - gate[i] / gate_scale) (the
// derivative of gate_scale * sigmoid(z) expressed through its output), formed in fp64 exactly
// as the CPU backend does (the quotient gate / gate_scale in fp32, the products in fp64), then
// rounded to dz's type. gate, dgate fp32 (n); dz f32 or bf16 (written).
void value_gate_sigmoid_backward(const float* gate, const float* dgate, float gate_scale,
                                 float* dz, int64_t n, cudaStream_t stream);
void value_gate_sigmoid_backward(const float* gate, const float* dgate, float gate_scale,
                                 __nv_bfloat16* dz, int64_t n, cudaStream_t stream);
// Backward of the gated mix given dv: demb[r,h,d] = gate[r,h] * dv[r,h,d] (written), and
// dgate[r,h] = sum_d dv[r,h,d] * emb[r,h,d] (written, fp32 accumulation). dctx = dv is the
// caller's (no kernel needed).
void value_gated_mix_backward(const float* dv, const float* emb, const float* gate, float* demb,
                              float* dgate, int64_t N, int64_t heads, int64_t hd,
                              cudaStream_t stream);
void value_gated_mix_backward(const __nv_bfloat16* dv, const __nv_bfloat16* emb,
                              const float* gate, __nv_bfloat16* demb, float* dgate, int64_t N,
                              int64_t heads, int64_t hd, cudaStream_t stream);

}  // namespace vt::cuda
