// OpenMP idle-thread waiting set at start-up (see openmp_wait.h).
#include "core/openmp_wait.h"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace vt {

namespace {
constexpr const char* kSpinCount = "1000";

bool is_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}
}  // namespace

void shorten_openmp_spin(char** argv) {
  if (is_set("GOMP_SPINCOUNT") || is_set("OMP_WAIT_POLICY")) return;  // the user's choice
  const char* keep = std::getenv("VTRAIN_OMP_DEFAULTS");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  if (omp_get_max_threads() <= 1) return;  // no team, nobody waits
  if (setenv("GOMP_SPINCOUNT", kSpinCount, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Not re-executed (no /proc, say): libgomp keeps what it read at load; so does the environment
  // (openmp_wait_description reads it).
  unsetenv("GOMP_SPINCOUNT");
}

std::string openmp_wait_description() {
  // The environment the process started with (what libgomp read at load), not later setenv.
  std::string spin, policy;
  if (FILE* f = std::fopen("/proc/self/environ", "rb")) {
    std::string entry;
    for (int c = std::fgetc(f);; c = std::fgetc(f)) {
      if (c == '\0' || c == EOF) {
        if (entry.rfind("GOMP_SPINCOUNT=", 0) == 0) spin = entry.substr(15);
        if (entry.rfind("OMP_WAIT_POLICY=", 0) == 0) policy = entry.substr(16);
        entry.clear();
        if (c == EOF) break;
      } else {
        entry += static_cast<char>(c);
      }
    }
    std::fclose(f);
  } else {
    if (is_set("GOMP_SPINCOUNT")) spin = std::getenv("GOMP_SPINCOUNT");
    if (is_set("OMP_WAIT_POLICY")) policy = std::getenv("OMP_WAIT_POLICY");
  }
  if (!spin.empty())
    return absl::StrCat("OpenMP idle threads: spin ", spin, " iterations, then sleep (GOMP_SPINCOUNT)");
  if (!policy.empty()) return absl::StrCat("OpenMP idle threads: OMP_WAIT_POLICY=", policy);
  return "OpenMP idle threads: libgomp's default (spin up to 300000 iterations)";
}

}  // namespace vt
