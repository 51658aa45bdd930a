// The device built-ins of CUDA C++ for kernels compiled as host C++ by the emulation: thread and
// block indices, barriers, warp collectives, atomics and the device math functions that the host
// C library lacks. Semantics follow the CUDA C++ Programming Guide; where the guide leaves a
// result undefined (a shuffle reading a lane that does not take part) the emulation returns
// all-ones bits (NaN for floats) so that relying on it shows up in tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "vt_emu/simt.h"

#define threadIdx (::vt_emu::detail::cur_thread().idx)
#define blockIdx (::vt_emu::detail::cur_block().idx)
#define blockDim (::vt_emu::detail::cur_block().block_dim)
#define gridDim (::vt_emu::detail::cur_block().grid_dim)
constexpr int warpSize = 32;

// --- barriers -------------------------------------------------------------------------------
inline void __syncthreads(const std::source_location& loc = std::source_location::current()) {
  ::vt_emu::detail::block_barrier(0, 1, loc);
}
inline int __syncthreads_count(int pred,
                               const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::block_barrier(1, pred, loc);
}
inline int __syncthreads_and(int pred,
                             const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::block_barrier(2, pred, loc);
}
inline int __syncthreads_or(int pred,
                            const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::block_barrier(3, pred, loc);
}

// --- warp collectives -----------------------------------------------------------------------
namespace vt_emu::detail {
template <class T>
inline T warp_op(WarpOp op, unsigned mask, const T& var, int arg, int width,
                 const std::source_location& loc) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>,
                "warp shuffles move trivially copyable values of at most 16 bytes");
  uint64_t v[2] = {0, 0};
  std::memcpy(v, &var, sizeof(T));
  warp_collective(op, mask, v, unsigned(sizeof(T)), arg, width, loc);
  T r = var;
  std::memcpy(&r, v, sizeof(T));
  return r;
}
}  // namespace vt_emu::detail

inline void __syncwarp(unsigned mask = 0xffffffffu,
                       const std::source_location& loc = std::source_location::current()) {
  int zero = 0;
  (void)::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kSync, mask, zero, 0, 32, loc);
}
template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
                     const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kShflIdx, mask, var, src_lane,
                                   width, loc);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                        const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kShflUp, mask, var, int(delta),
                                   width, loc);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                          const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kShflDown, mask, var, int(delta),
                                   width, loc);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                         const std::source_location& loc = std::source_location::current()) {
  return ::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kShflXor, mask, var, lane_mask,
                                   width, loc);
}
inline unsigned __ballot_sync(unsigned mask, int pred,
                              const std::source_location& loc = std::source_location::current()) {
  const int p = pred != 0;
  return unsigned(::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kBallot, mask,
                                            uint64_t(p), 0, 32, loc));
}
inline int __any_sync(unsigned mask, int pred,
                      const std::source_location& loc = std::source_location::current()) {
  return int(::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kAny, mask,
                                       uint64_t(pred != 0), 0, 32, loc));
}
inline int __all_sync(unsigned mask, int pred,
                      const std::source_location& loc = std::source_location::current()) {
  return int(::vt_emu::detail::warp_op(::vt_emu::detail::WarpOp::kAll, mask,
                                       uint64_t(pred != 0), 0, 32, loc));
}

// --- memory fences and loads ----------------------------------------------------------------
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// --- atomics (blocks may run on several OS threads: real atomic operations) ------------------
template <class T>
inline T vt_emu_atomic_cas_loop(T* addr, T val, T (*f)(T, T)) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U* a = reinterpret_cast<U*>(addr);
  U old = __atomic_load_n(a, __ATOMIC_RELAXED), next;
  do {
    T o;
    std::memcpy(&o, &old, sizeof(T));
    const T n = f(o, val);
    std::memcpy(&next, &n, sizeof(T));
  } while (!__atomic_compare_exchange_n(a, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  T r;
  std::memcpy(&r, &old, sizeof(T));
  return r;
}
inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* a, unsigned v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* a, float v) {
  return vt_emu_atomic_cas_loop<float>(a, v, [](float x, float y) { return x + y; });
}
inline double atomicAdd(double* a, double v) {
  return vt_emu_atomic_cas_loop<double>(a, v, [](double x, double y) { return x + y; });
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) {
  return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);
}
inline int atomicMax(int* a, int v) {
  return vt_emu_atomic_cas_loop<int>(a, v, [](int x, int y) { return x > y ? x : y; });
}
inline unsigned atomicMax(unsigned* a, unsigned v) {
  return vt_emu_atomic_cas_loop<unsigned>(a, v, [](unsigned x, unsigned y) { return x > y ? x : y; });
}
inline int atomicMin(int* a, int v) {
  return vt_emu_atomic_cas_loop<int>(a, v, [](int x, int y) { return x < y ? x : y; });
}
inline unsigned atomicMin(unsigned* a, unsigned v) {
  return vt_emu_atomic_cas_loop<unsigned>(a, v, [](unsigned x, unsigned y) { return x < y ? x : y; });
}
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* a, unsigned v) {
  return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicExch(float* a, float v) {
  return vt_emu_atomic_cas_loop<float>(a, v, [](float, float y) { return y; });
}
inline int atomicCAS(int* a, int compare, int v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline unsigned atomicCAS(unsigned* a, unsigned compare, unsigned v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long compare,
                                    unsigned long long v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}

// --- math that the host C library does not have -----------------------------------------------
// The fast intrinsics (__expf, __logf, __fdividef) are computed exactly here; on the GPU they
// are approximations with a few ulp of error, which tests must allow for anyway.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
// __fadd_rn / __fmul_rn are never contracted into an FMA by nvcc: keep them apart here too.
__attribute__((noinline)) inline float __fadd_rn(float a, float b) { return a + b; }
__attribute__((noinline)) inline float __fmul_rn(float a, float b) { return a * b; }
inline int __float_as_int(float x) { int r; std::memcpy(&r, &x, 4); return r; }
inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
inline unsigned __float_as_uint(float x) { unsigned r; std::memcpy(&r, &x, 4); return r; }
inline float __uint_as_float(unsigned x) { float r; std::memcpy(&r, &x, 4); return r; }
inline long long __double_as_longlong(double x) { long long r; std::memcpy(&r, &x, 8); return r; }
inline double __longlong_as_double(long long x) { double r; std::memcpy(&r, &x, 8); return r; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}

// CUDA's global min/max overloads.
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
