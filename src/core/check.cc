// Implementation of the VT_CHECK failure path.
#include "core/check.h"

namespace vt::detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "vtrain internal error at %s:%d: check failed: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace vt::detail
