// The row view of activations that ops share: any tensor seen as (numel / last dim) rows of its
// last dimension. A leaf header (the op families and ops.h include it; it includes only tensor.h).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt::ops {

inline int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }  // numel / last dim

}  // namespace vt::ops
