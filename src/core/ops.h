// The op interface the model and optimizers call: tensor-level wrappers that check shapes,
// dtypes and devices, then dispatch to the backend of the tensors' device (core/backend.h).
// An umbrella: dense algebra and copies are declared here (ops.cc); every other op
// family has its own header and file in core/ops/ (checks, host path and CUDA launch together).
// Weights are 2-D (K, N); activations are any tensor viewed as (numel / K, K) rows. Activations
// may be f32 or bf16 (every op computes in fp32); parameters, gradients, optimizer states,
// norms' rstd, attention's lse and the cross-entropy statistics are f32.
#pragma once
#include "core/backend.h"
#include "core/cpu_kernels.h"
#include "core/ops/activation.h"
#include "core/ops/attention.h"
#include "core/ops/embedding.h"
#include "core/ops/optim.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/value_gate.h"
#include "core/ops/xent.h"
#include "core/tensor.h"

namespace vt::ops {

// y (M,N) = x (M,K) @ w (K,N), or += when accumulate.
void matmul(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate = false);
// dx (M,K) = dy (M,N) @ w^T, or += when accumulate.
void matmul_dx(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate);
// dw (K,N) += x^T (K,M) @ dy (M,N).
void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw);
// The general GEMM (row-major, leading dimensions; see GemmArgs).
void gemm(const GemmArgs& g);

// y += alpha * x (same numel).
void axpy(const Tensor& y, const Tensor& x, float alpha = 1.0f);
// y = alpha * x (y may be x).
void scale_copy(const Tensor& y, const Tensor& x, float alpha);
// sum(a * b) and sum(x^2) in double (synchronizes with the device).
double dot(const Tensor& a, const Tensor& b);
double sum_squares(const Tensor& x);
// Sum of sum_squares over tensors of one device, in list order (one synchronization).
double sum_squares_list(const std::vector<Tensor>& xs);
// Copy x into y (same numel; converts f32 <-> bf16 when the dtypes differ; any devices).
void copy(const Tensor& y, const Tensor& x);
// t.flat[index] += value (f32).
void add_scalar(const Tensor& t, int64_t index, double value);
// Device-side coefficients: y = coef[index] * x; y += coef[index] * x (coef f32, same device).
void scale_copy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index = 0);
void axpy_coef(const Tensor& y, const Tensor& x, const Tensor& coef, int64_t index = 0);
// out.flat[index] = float(sum(a * b)) (fp64 accumulation), without synchronizing.
void dot_into(const Tensor& a, const Tensor& b, const Tensor& out, int64_t index = 0);
// x /= sqrt(sum(x^2)) * scale + eps, on the device.
void normalize_frobenius(const Tensor& x, double scale, double eps);
// y (cols, rows) = x (rows, cols)^T.
void transpose(const Tensor& y, const Tensor& x, int64_t rows, int64_t cols);
// Strided block copy on one device: rows x cols elements from src (starting at element
// src_offset, row stride src_ld) to dst (dst_offset, dst_ld). Same dtype.
void copy_2d(const Tensor& dst, int64_t dst_offset, int64_t dst_ld, const Tensor& src,
             int64_t src_offset, int64_t src_ld, int64_t rows, int64_t cols);

int64_t rows_of(const Tensor& t);  // numel / last dim


}  // namespace vt::ops
