// Device and device-communicator selection (see device_setup.h).
#include "train/device_setup.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/backend.h"
#include "core/process_device.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"

#if VTRAIN_HAS_CUDA
#include "core/cuda_backend.h"
#include "parallel/nccl_communicator.h"
#endif

namespace vt {

absl::StatusOr<DevicePlan> setup_device(const TrainOptions& o, Communicator* world) {
  DevicePlan plan;
  plan.act_dtype = o.act_dtype;
  if (o.device == RunDevice::kCPU) {
    plan.description = absl::StrCat("cpu, ", dtype_name(plan.act_dtype), " activations");
    return plan;
  }
  plan.device = Device::kCUDA;
  if (o.device == RunDevice::kEmulated) {
    set_device_backend(make_device_emulator());
    plan.description = absl::StrCat("emulated device (the GPU code path on the CPU), ",
                                    dtype_name(plan.act_dtype), " activations");
    return plan;
  }
  const int gpus = cuda_device_count_or_zero();
  double ok = gpus > 0 ? 1.0 : 0.0;
  world->all_reduce_sum(&ok, 1);
  if (ok < world->size()) {
#if VTRAIN_HAS_CUDA
    return agreed(absl::FailedPreconditionError(
        "--device cuda: a rank sees no CUDA device (check the driver, CUDA_VISIBLE_DEVICES and "
        "the job's GPU allocation), or run with --device cpu"));
#else
    return agreed(absl::FailedPreconditionError(
        "--device cuda: this vtrain was built without CUDA (nvcc was not found at build time); "
        "rebuild on a machine with the CUDA toolkit, or run with --device cpu"));
#endif
  }
  // The CUDA emulation is thousands of times slower than a GPU: a run (or a script) asking for a
  // GPU does not get it without saying so.
  const char* allow = std::getenv(kAllowEmulatedCudaEnv);
  double emulated = cuda_devices_are_emulated() && !(allow != nullptr && std::string(allow) == "1") ? 1.0 : 0.0;
  world->all_reduce_sum(&emulated, 1);
  if (emulated > 0)
    return agreed(absl::FailedPreconditionError(absl::StrCat(
        "--device cuda: the only CUDA device here is vtrain's CUDA emulation (cuda_emu/: the GPU "
        "code path run on the CPU, thousands of times slower than a GPU), not a GPU; run with "
        "--device cpu, or set ", kAllowEmulatedCudaEnv, "=1 to run the GPU code path on the "
        "emulation (the test suite does)")));
  set_device_backend(make_cuda_backend());
  plan.description = absl::StrCat("cuda (", backend(Device::kCUDA).name(), ", ", gpus,
                                  cuda_devices_are_emulated()
                                      ? " device(s) of vtrain's CUDA emulation per rank: emulated, not a GPU), "
                                      : " visible GPU(s) per rank), ",
                                  dtype_name(plan.act_dtype), " activations");
  return plan;
}

absl::StatusOr<std::string> setup_device_comms(const TrainOptions& o, const DevicePlan& plan,
                                               ProcessGrid& grid) {
  if (plan.device == Device::kCPU) return std::string("MPI");
  if (grid.world()->size() == 1) return std::string("none (one rank)");
  DeviceComm choice = o.device_comm;
  const bool native_possible = o.device == RunDevice::kCUDA && node_local_size() <= cuda_device_count_or_zero();
  // NCCL matches point-to-point messages by order, not by tag; the interleaved schedule's
  // forward and backward streams between two ranks are kept apart by tags (pipeline.h), so
  // --vpp runs over MPI: `auto` picks it, an explicit nccl is refused.
  if (choice == DeviceComm::kNccl && o.vpp > 1)
    return agreed(absl::InvalidArgumentError(
        "--vpp with NCCL device communication is not supported (the interleaved schedule's "
        "messages are matched by tag); pass --device-comm mpi or drop --vpp"));
  if (choice == DeviceComm::kAuto)
    choice = native_possible && o.vpp == 1 ? DeviceComm::kNccl : DeviceComm::kMpi;
  if (choice == DeviceComm::kMpi)
    return std::string(o.vpp > 1 && native_possible
                           ? "MPI, device tensors staged through host memory (--vpp needs tagged messages)"
                           : "MPI, device tensors staged through host memory");
  if (o.device != RunDevice::kCUDA)
    return agreed(absl::InvalidArgumentError("--device-comm nccl needs --device cuda"));
  if (!native_possible)
    return agreed(absl::FailedPreconditionError(absl::StrCat(
        "--device-comm nccl: ", node_local_size(), " ranks on this node share ",
        cuda_device_count_or_zero(), " GPU(s); NCCL needs one GPU per rank (use --device-comm mpi)")));
#if VTRAIN_HAS_CUDA
  // Every NCCL communicator is given the CUDA backend's compute stream (setup_device registered
  // the backend; it outlives the grid's communicators).
  const cudaStream_t compute = cuda_compute_stream(backend(Device::kCUDA));
  grid.use_device_communicators([compute](Communicator* group) -> std::unique_ptr<Communicator> {
    auto* mpi = dynamic_cast<MpiCommunicator*>(group);
    VT_CHECK_MSG(mpi != nullptr, "NCCL groups are built over MPI communicators");
    return std::make_unique<NcclCommunicator>(mpi->comm(), compute);
  });
  return std::string("NCCL for device tensors, MPI for host values");
#else
  return agreed(absl::FailedPreconditionError("built without CUDA: no NCCL"));
#endif
}

std::unique_ptr<op_profile::DeviceClock> device_profile_clock(const DevicePlan& plan) {
#if VTRAIN_HAS_CUDA
  if (plan.device != Device::kCPU) return make_cuda_profile_clock(backend(Device::kCUDA));
#endif
  return nullptr;
}

}  // namespace vt
