// glibc allocator settings for host tensors (see host_allocator.h).
#include "core/host_allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace vt {

void tune_host_allocator() {
  const char* keep = std::getenv("VTRAIN_MALLOC_DEFAULTS");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit; fixes the threshold
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // freed memory stays for the next step's buffers
  mallopt(M_TOP_PAD, 64 << 20);         // grow the heap in large steps
}

}  // namespace vt
