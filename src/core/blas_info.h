// What BLAS the running binary uses: OpenBLAS's build string, its threading model (sequential,
// pthreads or OpenMP: only the OpenMP build shares one thread pool with vtrain's own kernels) and
// the thread counts of OpenMP and BLAS. For `vtrain devices` and the start-up banner.
#pragma once
#include <string>

namespace vt {

struct BlasInfo {
  std::string config;     // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  std::string threading;  // "sequential", "pthreads" or "OpenMP"
  int blas_threads = 0;
  int omp_threads = 0;
  std::string library;    // the file the dynamic loader mapped
};

BlasInfo blas_info();
std::string blas_description();  // one line

}  // namespace vt
