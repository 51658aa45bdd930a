// `vtrain devices`: the CPU side (the BLAS build, its threading model, the OpenMP and BLAS thread
// counts) and the CUDA devices this build can use, or that the only ones are vtrain's CUDA
// emulation. Exit 0 when at least one GPU is usable, 3 when no CUDA device is, 4 when the only
// CUDA devices are the emulation (docs/design.md "Exit codes"): a script keying on the exit code
// never takes the emulation for a GPU.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/flags.h"
#include "core/backend.h"
#include "core/blas_info.h"

namespace vt::cli {

namespace {

constexpr int kExitNoCudaDevice = 3;
constexpr int kExitOnlyEmulation = 4;

const CommandSpec& devices_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain devices";
    c.synopsis = "vtrain devices";
    c.epilog = "Prints the BLAS build and threads, then the usable CUDA devices. Exit 0 when at least\n"
               "one GPU is usable, 3 when no CUDA device is, 4 when the only CUDA devices are vtrain's\n"
               "CUDA emulation (emulated, not a GPU; --device cuda then needs\n"
               "VTRAIN_ALLOW_EMULATED_CUDA=1).\n";
    return c;
  }();
  return spec;
}

}  // namespace

int cmd_devices(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(devices_command()).c_str());
    return 0;
  }
  absl::StatusOr<Flags> f = Flags::parse(devices_command(), argc, argv, 2);
  if (!f.ok()) return report_error("devices", std::string(f.status().message()).c_str());
  std::printf("%s\n", blas_description().c_str());
  const int n = cuda_device_count_or_zero();
#if VTRAIN_HAS_CUDA
  if (n > 0 && cuda_devices_are_emulated()) {
    std::printf("0 GPUs usable: the %d CUDA device(s) are vtrain's CUDA emulation, emulated, not a "
                "GPU (cuda_emu/: the GPU code path on the CPU, thousands of times slower); "
                "--device cuda runs on it only with %s=1 (exit %d)\n",
                n, kAllowEmulatedCudaEnv, kExitOnlyEmulation);
    for (const std::string& d : cuda_device_descriptions()) std::printf("  %s\n", d.c_str());
    return kExitOnlyEmulation;
  }
  std::printf("%d CUDA device(s) usable (vtrain built with CUDA)\n", n);
  for (const std::string& d : cuda_device_descriptions()) std::printf("  %s\n", d.c_str());
#else
  std::printf("0 CUDA devices usable (vtrain built without CUDA)\n");
#endif
  return n > 0 ? 0 : kExitNoCudaDevice;
}

}  // namespace vt::cli
