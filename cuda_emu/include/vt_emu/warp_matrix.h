// The PTX-level warp matrix instructions for kernels compiled by the emulation: the tensor-core
// product mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, ldmatrix.sync.aligned.m8n8
// (.x1/.x2/.x4, optionally .trans, .b16) and the asynchronous copies cp.async (+ commit_group,
// wait_group). Kernels do not call these directly: kernels/mma.cuh wraps them (inline PTX under
// nvcc, these functions under the emulation).
//
// mma and ldmatrix are warp exchanges (vt_emu/simt.h): each lane hands over its registers and
// the operation runs once over all 32 lanes, moving every element exactly as the fragment
// layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type",
// "ldmatrix") say. Both need all 32 lanes of the warp (the .aligned qualifier); fewer, or lanes
// at different warp operations, make the launch fail. cp.async copies are queued per thread and
// land in shared memory only when the thread waits for their group, so a kernel that reads the
// destination before cp.async.wait_group reads what was there before, as it may on a GPU.
#pragma once
#include <cstdint>
#include <source_location>

namespace vt_emu {

// d = a * b + c for one warp: a (16x16, row), b (16x8, col) bf16 pairs in 32-bit registers, c and
// d (16x8) fp32; d may be c. Products of bf16 are exact in fp32; the 16 products of an element are
// added to c in k order in fp32 (the hardware's adder tree rounds differently: within fp32
// rounding of the sum, which tests must allow for).
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                       const std::source_location& loc = std::source_location::current());

// ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16: lanes 8i..8i+7 give the addresses of the
// 8 rows (16 bytes each, 16-byte aligned) of matrix i < num; every lane receives one register
// per matrix. `row` is this lane's row address (ignored for lanes >= 8 * num).
void ldmatrix_b16(uint32_t* regs, int num, bool trans, const void* row,
                  const std::source_location& loc = std::source_location::current());

// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: copies `bytes` (4, 8 or 16,
// both addresses aligned to it) of which the first src_bytes come from src and the rest are
// zero, once the thread waits for the copy's group.
void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes);
// cp.async.commit_group: the copies issued since the last commit form a group.
void cp_async_commit();
// cp.async.wait_group n: completes every committed group but the n most recent ones.
void cp_async_wait(int n);

}  // namespace vt_emu
