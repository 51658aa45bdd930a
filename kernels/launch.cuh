// Kernel launches and dynamic shared memory, written once for both builds of kernels/:
//   VT_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)  is kernel<<<...>>>(args...)
//   VT_DYNAMIC_SHARED(T, name);                                  is extern __shared__ T name[];
// nvcc takes the definitions below. The emulated CUDA build (cuda_emu/README.md) compiles the
// same files as host C++ and defines both macros first (cuda_emu/include/vt_emu/launch.h), so
// kernel files contain no emulation-specific code. `kernel` must name one function: write the
// template arguments of a kernel template out (the emulation binds the arguments to that
// function's parameters); one with a comma in them is launched through a pointer variable (see
// kernels/xent.cu).
#pragma once

#ifndef VT_LAUNCH
#define VT_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif
#ifndef VT_DYNAMIC_SHARED
#define VT_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
