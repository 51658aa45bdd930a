// What other host code (NcclCommunicator) needs to know about the CUDA backend
// (src/core/cuda_backend.cc). Host-only header; only for builds with CUDA.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>

#include "core/op_profile.h"

namespace vt {

// The stream on which the registered CUDA backend enqueues every op, copy, allocation and free
// (a non-default stream it owns). nullptr when the backend registered for Device::kCUDA is not
// the CUDA backend (none registered, or the device emulator).
cudaStream_t cuda_backend_stream();

// The clock `--profile` times device ops with (core/op_profile.h): CUDA events recorded on the
// backend's stream before and after each op, read back in batches, so the profile shows each
// op's time on the GPU instead of its launch time. nullptr when cuda_backend_stream() is.
std::unique_ptr<op_profile::DeviceClock> make_cuda_profile_clock();

// The attention kernels the CUDA backend runs for bf16 activations. kTensorCores (the default):
// the flash kernels on tensor cores (kernels/attention_tc.cuh) wherever they apply (head dim 32,
// 64 or 128, 16-byte aligned tensors), the reference kernels (kernels/attention.cuh) otherwise;
// kReference: always the reference kernels. f32 and mixed-dtype calls always run the reference
// kernels. The environment variable VTRAIN_CUDA_ATTENTION=reference|tensor-cores sets the
// starting choice; tests switch with set_cuda_attention_kernels.
enum class CudaAttentionKernels { kTensorCores, kReference };
void set_cuda_attention_kernels(CudaAttentionKernels k);
CudaAttentionKernels cuda_attention_kernels();

}  // namespace vt
