// The BLAS the process runs (see blas_info.h).
#include "core/blas_info.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include "absl/strings/str_cat.h"
#include "core/openmp_wait.h"

namespace vt {

BlasInfo blas_info() {
  BlasInfo b;
  const char* cfg = openblas_get_config();
  b.config = cfg ? cfg : "";
  while (!b.config.empty() && b.config.back() == ' ') b.config.pop_back();
  switch (openblas_get_parallel()) {
    case 0: b.threading = "sequential"; break;
    case 1: b.threading = "pthreads"; break;
    case 2: b.threading = "OpenMP"; break;
    default: b.threading = "unknown"; break;
  }
  b.blas_threads = openblas_get_num_threads();
  b.omp_threads = omp_get_max_threads();
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&openblas_get_config), &info) != 0 && info.dli_fname)
    b.library = info.dli_fname;
  return b;
}

std::string blas_description() {
  const BlasInfo b = blas_info();
  return absl::StrCat("BLAS: ", b.config, " | threading ", b.threading, " | ", b.blas_threads,
                      " BLAS thread(s), ", b.omp_threads, " OpenMP thread(s) | ", b.library, " | ",
                      openmp_wait_description());
}

}  // namespace vt
