// The glibc allocator settings for host tensors. A training step allocates and frees the same
// large activation and gradient buffers every step; with glibc's defaults each buffer above the
// (adaptive) mmap threshold is a fresh mmap, page-faulted in by the zero fill, and unmapped
// again at free, which cost a quarter of a CPU step at the tiny preset (`vtrain train
// --profile`: host_alloc_zeroed). Keeping blocks up to 32 MiB (glibc's largest threshold) in the
// heap and never trimming it reuses the same pages step after step; the process keeps its peak
// heap, which the next step needs anyway.
#pragma once

namespace vt {

// Call once at process start, before the first large allocation. VTRAIN_MALLOC_DEFAULTS=1 keeps
// glibc's defaults (for comparing).
void tune_host_allocator();

}  // namespace vt
