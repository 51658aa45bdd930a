// The op declared in ops.h itself: the strided device copy (the op families:
// core/ops/*.cc).
#include "core/ops.h"

#include <initializer_list>

#include "core/op_profile.h"
#include "core/ops/dispatch.h"

namespace vt::ops {

using namespace detail;

void copy_2d(const Tensor& dst, int64_t dst_offset, int64_t dst_ld, const Tensor& src,
             int64_t src_offset, int64_t src_ld, int64_t rows, int64_t cols) {
  VT_CHECK_MSG(dst.dtype() == src.dtype(), "copy_2d: dtypes differ");
  VT_CHECK(rows >= 0 && cols >= 0 && cols <= dst_ld && cols <= src_ld);
  if (rows == 0 || cols == 0) return;
  VT_CHECK_MSG(dst_offset + (rows - 1) * dst_ld + cols <= dst.numel() &&
                   src_offset + (rows - 1) * src_ld + cols <= src.numel(),
               "copy_2d out of bounds");
  const size_t es = dtype_size(dst.dtype());
  on("copy_2d", {&dst, &src})
      ->copy_2d(static_cast<char*>(dst.raw()) + dst_offset * es, dst_ld * es,
               static_cast<const char*>(src.raw()) + src_offset * es, src_ld * es, cols * es,
               rows);
}

}  // namespace vt::ops
