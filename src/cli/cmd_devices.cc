// `vtrain devices`: the CPU side (the BLAS build, its threading model, the OpenMP and BLAS thread
// counts) and the CUDA devices this build can use (or that the device is the emulation). Exit 0
// when at least one CUDA device is usable, 3 when none.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/flags.h"
#include "core/backend.h"
#include "core/blas_info.h"

namespace vt::cli {

namespace {

const CommandSpec& devices_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain devices";
    c.synopsis = "vtrain devices";
    c.epilog = "Prints the BLAS build and threads, then the usable CUDA devices; exit 0 when at least\n"
               "one CUDA device, 3 when none.\n";
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
  std::printf("%d CUDA device(s) usable (vtrain built with CUDA)\n", n);
  for (const std::string& d : cuda_device_descriptions()) std::printf("  %s\n", d.c_str());
#else
  std::printf("0 CUDA devices usable (vtrain built without CUDA)\n");
#endif
  return n > 0 ? 0 : 3;
}

}  // namespace vt::cli
