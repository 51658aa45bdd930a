// The embedding op family: rows [row_begin, row_begin + table.dim(0)) of an f32 table gathered
// by i32 ids (N) into out (N, C) (zeros for rows not owned: vocabulary-parallel shards), and the
// backward that adds rows of dout into dtable, repeated ids in id order (deterministic).
// Host kernels: cpu_kernels.h (embedding_*); CUDA kernels: kernels/embedding.cu.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt::ops {

void embedding(const Tensor& table, int64_t row_begin, const Tensor& ids, const Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_begin,
                        const Tensor& dtable);

}  // namespace vt::ops
