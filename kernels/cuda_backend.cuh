// What code in vtrain_cuda (NcclCommunicator) needs to know about the CUDA backend
// (src/core/cuda_backend.cc, compiled into vtrain_lib). Host-only header.
#pragma once
#include <cuda_runtime_api.h>

namespace vt {

// The stream on which the registered CUDA backend enqueues every op, copy, allocation and free
// (a non-default stream it owns). nullptr when the backend registered for Device::kCUDA is not
// the CUDA backend (none registered, or the device emulator).
cudaStream_t cuda_backend_stream();

}  // namespace vt
