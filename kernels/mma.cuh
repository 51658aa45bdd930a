// Tensor-core primitives for kernels: the warp-level bf16 product mma.sync m16n8k16 (fp32
// accumulation), ldmatrix (.x1/.x2/.x4, plain and .trans), the asynchronous global-to-shared
// copies cp.async with their groups, and the two scalar instructions of a softmax over MMA
// scores (ex2.approx, max.NaN). The one place where kernels touch PTX: under nvcc each
// function is one inline PTX instruction (sm_80 and later); under the CUDA emulation
// (cuda_emu/README.md) it calls the emulation's implementation (vt_emu/warp_matrix.h), which
// moves every element as the PTX ISA's fragment layouts say. Kernel code is the same for both.
//
// Fragments (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and c = lane % 4:
//   FragA: 16x16 bf16, row-major A. r[0] = (row g, cols 2c, 2c+1), r[1] = (row g+8, same cols),
//          r[2] = (row g, cols 2c+8, 2c+9), r[3] = (row g+8, cols 2c+8, 2c+9); low half first.
//   FragB: 16x8 bf16 ("col": B[k][n]). r[0] = (rows k = 2c, 2c+1, col n = g), r[1] = rows 2c+8,
//          2c+9.
//   FragC: 16x8 fp32. x[0], x[1] = (row g, cols 2c, 2c+1), x[2], x[3] = (row g+8, same cols).
// So the accumulators of two neighbouring n-tiles (cols 0-7 and 8-15) are, rounded to bf16, the
// FragA of a 16x16 operand: how a score tile becomes the left operand of the next product
// without leaving registers (a_from_c below).
//
// ldmatrix: lanes 8i..8i+7 give the row addresses (16 bytes each, 16-byte aligned, shared
// memory) of 8x8 matrix i; register i of lane l receives row l/4, cols 2(l%4), 2(l%4)+1 (with
// .trans: of the transposed matrix). Hence, for a tile stored row-major:
//   A operand [m][k]           ldsm_x4 (no trans), lane l -> row (l % 16), col 8 (l / 16)
//   B operand from [n][k]      ldsm_x4 (no trans): two k-halves of two n-tiles
//   B operand from [k][n]      ldsm_x4_trans
// (the address patterns are in kernels/attention_tc.cu).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#if defined(VT_CUDA_EMULATION)
#include <source_location>

#include "vt_emu/warp_matrix.h"
// The emulation reports a misused warp instruction at the kernel line that called it.
#define VT_TC_SITE , const std::source_location& vt_site = std::source_location::current()
#else
#define VT_TC_SITE
#endif

namespace vt::cuda::tc {

struct FragA {
  uint32_t r[4];
};
struct FragB {
  uint32_t r[2];
};
struct FragC {
  float x[4];
};

// Two floats as one register of two bf16 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  static_assert(sizeof(v) == sizeof(u));
  __builtin_memcpy(&u, &v, sizeof(u));
  return u;
}

// d += a * b (16x8 += 16x16 * 16x8), fp32 accumulation.
__device__ __forceinline__ void mma_bf16(FragC& d, const FragA& a, const FragB& b VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::mma_m16n8k16_bf16(d.x, a.r, b.r, d.x, vt_site);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
#endif
}

#if !defined(VT_CUDA_EMULATION)
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// Four 8x8 b16 matrices; `row` is this lane's row address (see the header comment).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* row VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::ldmatrix_b16(r, 4, false, row, vt_site);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
#endif
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* row VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::ldmatrix_b16(r, 4, true, row, vt_site);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
#endif
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void* row VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::ldmatrix_b16(r, 2, false, row, vt_site);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row)));
#endif
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t (&r)[2], const void* row VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::ldmatrix_b16(r, 2, true, row, vt_site);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row)));
#endif
}
__device__ __forceinline__ void ldsm_x1(uint32_t& r, const void* row VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::ldmatrix_b16(&r, 1, false, row, vt_site);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r)
               : "r"(smem_addr(row)));
#endif
}
__device__ __forceinline__ void ldsm_x1_trans(uint32_t& r, const void* row VT_TC_SITE) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::ldmatrix_b16(&r, 1, true, row, vt_site);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r)
               : "r"(smem_addr(row)));
#endif
}

// The FragA of a 16x16 operand whose columns 0-7 are the accumulator tile c0 and columns 8-15
// the tile c1 (rounded to bf16): see the layouts above.
__device__ __forceinline__ FragA a_from_c(const FragC& c0, const FragC& c1) {
  FragA a;
  a.r[0] = pack_bf16(c0.x[0], c0.x[1]);
  a.r[1] = pack_bf16(c0.x[2], c0.x[3]);
  a.r[2] = pack_bf16(c1.x[0], c1.x[1]);
  a.r[3] = pack_bf16(c1.x[2], c1.x[3]);
  return a;
}

// cp.async: 16 bytes global -> shared (L2 only, .cg); when !valid nothing is read and the 16
// bytes are zero (src-size 0). Completes at a cp_async_wait that covers its group.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::cp_async(smem, gmem, 16, valid ? 16u : 0u);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
#endif
}
// cp.async of 4 bytes (.ca), zero when !valid.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
#if defined(VT_CUDA_EMULATION)
  vt_emu::cp_async(smem, gmem, 4, valid ? 4u : 0u);
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(VT_CUDA_EMULATION)
  vt_emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed groups are pending. Other threads' copies
// are visible only after a barrier that follows their own wait.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(VT_CUDA_EMULATION)
  vt_emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// 2^x on the special function unit: ex2.approx.ftz.f32 (max error 2 ulp; a result below 2^-126
// is flushed to 0, -inf gives 0, NaN stays NaN), one instruction where exp2f adds a range check
// and a rescale around it. The emulation computes exp2f (within those 2 ulp).
__device__ __forceinline__ float exp2_approx(float x) {
#if defined(VT_CUDA_EMULATION)
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

// max(a, b) that is NaN when either is (max.NaN.f32, sm_80 and later): one instruction where
// the compare-and-select of detail::nan_max takes three. Same result up to the NaN's payload.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(VT_CUDA_EMULATION)
  return (a != a || a > b) ? a : b;
#else
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
#endif
}

}  // namespace vt::cuda::tc
