// How much host memory this process may still use: the kernel's MemAvailable, capped by the
// cgroup memory limit (a container's or a Slurm job's, v2 or v1) minus what the cgroup already
// uses. For refusing a run that cannot fit before it allocates (train/preflight.h).
#pragma once
#include <cstdint>

namespace vt {

// Bytes, or -1 when nothing can be read (not Linux, /proc missing).
int64_t host_available_bytes();

}  // namespace vt
