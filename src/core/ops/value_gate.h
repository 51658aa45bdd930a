// The value-embed gate op family: g = gate_scale * sigmoid(z) in place (f32); v = ctx + g * emb
// per row of hd (G = gate.numel() rows); backward: demb = g * dv, dgate = sum_d dv * emb;
// dz = dgate * g * (1 - g / gate_scale). Host loops here; CUDA kernels: kernels/value_mix.cu.
#pragma once
#include "core/tensor.h"

namespace vt::ops {

void gate_sigmoid(const Tensor& z, float gate_scale);
void gated_mix(const Tensor& ctx, const Tensor& emb, const Tensor& gate, const Tensor& v);
void gated_mix_backward(const Tensor& dv, const Tensor& emb, const Tensor& gate,
                        const Tensor& demb, const Tensor& dgate);
void gate_sigmoid_backward(const Tensor& gate, const Tensor& dgate, float gate_scale,
                           const Tensor& dz);

}  // namespace vt::ops
