// What other host code (device set-up, NcclCommunicator's builders, tests) needs of the CUDA
// backend (src/core/cuda_backend.cc), reached through an explicit Backend object, never a global.
// Host-only header; only for builds with CUDA.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>

#include "core/backend.h"
#include "core/cuda_runtime.h"
#include "core/op_profile.h"

namespace vt {

// The stream on which backend `b` enqueues every op, copy, allocation and free (a non-default
// stream its CudaRuntime owns); nullptr when `b` is not the CUDA backend (the device emulator,
// the CPU backend). What NcclCommunicator is built with.
cudaStream_t cuda_compute_stream(Backend& b);

// The clock `--profile` times b's device ops with (core/op_profile.h): CUDA events on b's
// stream (make_cuda_event_clock, core/cuda_runtime.h). nullptr when cuda_compute_stream(b) is.
std::unique_ptr<op_profile::DeviceClock> make_cuda_profile_clock(Backend& b);

}  // namespace vt
