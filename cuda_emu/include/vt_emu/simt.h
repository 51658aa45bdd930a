// The SIMT execution model of the CUDA emulation, as seen from an emulated kernel: which thread
// and block is running (threadIdx, blockIdx, blockDim, gridDim), block barriers, warp
// collectives and dynamic shared memory. Implemented by cuda_emu/simt.cc, which runs each block
// as cooperative fibers on one OS thread (see cuda_emu/README.md for the model and its limits).
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <vector>

namespace vt_emu {

// A cp.async copy issued by a thread and not yet completed (vt_emu/warp_matrix.h): `bytes` bytes
// to shared memory at dst, the first `src_bytes` of them read from src, the rest zero.
struct AsyncCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  unsigned bytes = 0, src_bytes = 0;
};

// One emulated GPU thread. idx is its threadIdx; lane and warp follow the linear thread index
// (x fastest, then y, then z) as on the hardware. async_copies holds the thread's cp.async copies
// in issue order; async_groups[i] is the end (in async_copies) of its i-th committed group that
// is still pending. Both are emptied at the start of every block.
struct SimtThread {
  uint3 idx;
  unsigned linear = 0, lane = 0, warp = 0;
  std::vector<AsyncCopy> async_copies;
  std::vector<size_t> async_groups;
};

// The block being run: blockIdx, blockDim, gridDim and the block's dynamic shared memory.
struct SimtBlock {
  uint3 idx;
  dim3 block_dim, grid_dim;
  unsigned char* dyn_smem = nullptr;
  size_t dyn_smem_bytes = 0;
};

namespace detail {
inline thread_local SimtThread* tl_thread = nullptr;
inline thread_local SimtBlock* tl_block = nullptr;

[[noreturn]] void outside_kernel(const char* what);

inline SimtThread& cur_thread() {
  if (tl_thread == nullptr) outside_kernel("threadIdx");
  return *tl_thread;
}
inline SimtBlock& cur_block() {
  if (tl_block == nullptr) outside_kernel("blockIdx/blockDim/gridDim");
  return *tl_block;
}

// __syncthreads and its counting forms: every non-exited thread of the block must arrive at the
// same call site; kind 0 plain, 1 count, 2 and, 3 or (pred is this thread's predicate).
int block_barrier(int kind, int pred, const std::source_location& loc);

enum class WarpOp : uint8_t {
  kSync, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kExchange
};

// A warp collective over the lanes of `mask` that have not exited: the calling lane waits until
// all of them arrive at a collective of the same kind, then gets its result. `value` holds the
// lane's operand (up to 16 bytes, `size` of them used) and receives the result.
void warp_collective(WarpOp op, unsigned mask, uint64_t value[2], unsigned size, int lane_arg,
                     int width, const std::source_location& loc);

// A warp-synchronous operation on the operands of all lanes at once (mma.sync, ldmatrix:
// vt_emu/warp_matrix.h). Every lane of `mask` passes a pointer to its own operand record; when
// all of them have arrived (at an exchange with the same `fn` called from the same source line:
// anything else is a divergent warp collective, as lanes at different instructions of an
// .aligned operation are on a GPU), fn(records, mask) runs once, on the lane that arrived last, with records[l] the
// record of lane l (nullptr for a lane not taking part). fn returns nullptr, or a message that
// makes the launch fail (e.g. "needs all 32 lanes"). `name` names the operation in messages.
using WarpExchangeFn = const char* (*)(void* const records[32], unsigned mask);
void warp_exchange(const char* name, unsigned mask, void* record, WarpExchangeFn fn,
                   const std::source_location& loc);

// A misuse found by the running thread itself (e.g. a misaligned cp.async): the launch fails
// with this message once the thread suspends or ends.
void thread_fault(const char* what, const std::source_location& loc);
}  // namespace detail

// The launch's dynamic shared memory as T* (extern __shared__ T name[] in CUDA). Its bytes are
// filled with 0xff at the start of every block, so reading what the block did not write shows.
template <class T>
inline T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::cur_block().dyn_smem);
}

}  // namespace vt_emu
