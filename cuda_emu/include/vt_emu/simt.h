// The SIMT execution model of the CUDA emulation, as seen from an emulated kernel: which thread
// and block is running (threadIdx, blockIdx, blockDim, gridDim), block barriers, warp
// collectives and dynamic shared memory. Implemented by cuda_emu/simt.cc, which runs each block
// as cooperative fibers on one OS thread (see cuda_emu/README.md for the model and its limits).
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <source_location>

namespace vt_emu {

// One emulated GPU thread. idx is its threadIdx; lane and warp follow the linear thread index
// (x fastest, then y, then z) as on the hardware.
struct SimtThread {
  uint3 idx;
  unsigned linear = 0, lane = 0, warp = 0;
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

enum class WarpOp : uint8_t { kSync, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };

// A warp collective over the lanes of `mask` that have not exited: the calling lane waits until
// all of them arrive at a collective of the same kind, then gets its result. `value` holds the
// lane's operand (up to 16 bytes, `size` of them used) and receives the result.
void warp_collective(WarpOp op, unsigned mask, uint64_t value[2], unsigned size, int lane_arg,
                     int width, const std::source_location& loc);
}  // namespace detail

// The launch's dynamic shared memory as T* (extern __shared__ T name[] in CUDA). Its bytes are
// filled with 0xff at the start of every block, so reading what the block did not write shows.
template <class T>
inline T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::cur_block().dyn_smem);
}

}  // namespace vt_emu
