// Device selection for a run: registers the backend that --device names (the CUDA backend, or
// the device emulator), picks the activation dtype, and wires native device communicators
// (NCCL) into the process grid when every rank has a GPU of its own.
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "core/communicator.h"
#include "core/op_profile.h"
#include "parallel/process_grid.h"
#include "train/options.h"

namespace vt {

struct DevicePlan {
  Device device = Device::kCPU;
  DType act_dtype = DType::kF32;
  std::string description;  // one line for the start-up banner
};

// Registers the backend for o.device (idempotent). Errors are agreed across ranks.
absl::StatusOr<DevicePlan> setup_device(const TrainOptions& o, Communicator* world);
// Chooses how device tensors cross ranks (o.device_comm) and installs NCCL communicators in the
// grid when that is the choice. Returns a one-line description.
absl::StatusOr<std::string> setup_device_comms(const TrainOptions& o, const DevicePlan& plan,
                                               ProcessGrid& grid);
// The clock `--profile` times the plan's device ops with: the CUDA backend's events, or null
// (host time) on the CPU, the device emulator or a build without CUDA.
std::unique_ptr<op_profile::DeviceClock> device_profile_clock(const DevicePlan& plan);

}  // namespace vt
