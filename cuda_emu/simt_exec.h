// Running a kernel launch on the SIMT emulation (cuda_emu/simt.cc): the stream workers of the
// emulated runtime call run_kernel; tests and tools adjust the scheduling (thread order, block
// workers) through the control functions.
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace vt_emu {

struct KernelRun {
  std::string name;  // for messages: the kernel expression as written at the launch
  dim3 grid, block;
  size_t dyn_smem = 0;
  std::function<void()> body;  // one GPU thread: calls the kernel with the launch's arguments
};

// Runs every block of `k` (on the calling OS thread, or on the block workers too). Returns "" on
// success, else a description of the fault (divergent barrier, deadlock, misuse of a warp
// collective); the remaining blocks are then not run.
std::string run_kernel(const KernelRun& k);

// Order in which the threads of a block (and the blocks of a grid) are run between barriers.
// kReverse runs the last thread first: a read of shared memory that another thread writes
// without a __syncthreads between them then sees stale data. Default: VT_EMU_THREAD_ORDER
// (forward|reverse), else forward.
enum class ThreadOrder { kForward, kReverse };
void set_thread_order(ThreadOrder o);
ThreadOrder thread_order();

// OS threads that run blocks of one launch concurrently (1: one after another on the stream's
// worker). Default: VT_EMU_BLOCK_WORKERS, else 1.
void set_block_workers(int n);
int block_workers();

struct SimtStats {
  uint64_t kernels = 0, blocks = 0, threads = 0, switches = 0;
};
SimtStats simt_stats();

}  // namespace vt_emu
