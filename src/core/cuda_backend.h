// What other host code (NcclCommunicator) needs to know about the CUDA backend
// (src/core/cuda_backend.cc). Host-only header; only for builds with CUDA.
#pragma once
#include <cuda_runtime_api.h>

namespace vt {

// The stream on which the registered CUDA backend enqueues every op, copy, allocation and free
// (a non-default stream it owns). nullptr when the backend registered for Device::kCUDA is not
// the CUDA backend (none registered, or the device emulator).
cudaStream_t cuda_backend_stream();

}  // namespace vt
