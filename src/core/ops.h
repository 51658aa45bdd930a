// The op interface the model and optimizers call: tensor-level wrappers that check shapes,
// dtypes and devices, then dispatch to the backend of the tensors' device (core/backend.h).
// An umbrella: every op family has its own header and file in core/ops/ (checks, host path and
// CUDA launch together, beside kernels/<family>.cu); ops.cc holds copy_2d.
// Weights are 2-D (K, N); activations are any tensor viewed as (numel / K, K) rows. Activations
// may be f32 or bf16 (every op computes in fp32); parameters, gradients, optimizer states,
// norms' rstd, attention's lse and the cross-entropy statistics are f32.
#pragma once
#include "core/backend.h"
#include "core/cpu_kernels.h"
#include "core/ops/activation.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/optim.h"
#include "core/ops/reduce.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/rows.h"
#include "core/ops/value_gate.h"
#include "core/ops/xent.h"
#include "core/tensor.h"

namespace vt::ops {

// Strided block copy on one device: rows x cols elements from src (starting at element
// src_offset, row stride src_ld) to dst (dst_offset, dst_ld). Same dtype.
void copy_2d(const Tensor& dst, int64_t dst_offset, int64_t dst_ld, const Tensor& src,
             int64_t src_offset, int64_t src_ld, int64_t rows, int64_t cols);

}  // namespace vt::ops
