// Force-included (g++ -include) at the top of every kernel source that the CUDA emulation
// compiles as host C++ (kernels/*.cu, emulator tests): the CUDA keywords as host C++, the real
// CUDA headers (types and declarations; the emulated runtime defines the functions), the device
// built-ins and the launch macros. A kernel file needs nothing else to build both ways.
#pragma once
#define VT_CUDA_EMULATION 1

// Keywords. __shared__ variables are per block: all fibers of a block run on one OS thread, so a
// block-scope thread_local is exactly one copy per running block.
#define __global__
#define __device__
#define __host__
#define __shared__ thread_local
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __grid_constant__

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include "vt_emu/device_builtins.h"
#include "vt_emu/runtime_cpp.h"
#include "vt_emu/launch.h"
