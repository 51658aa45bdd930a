// Internal invariant checks (VT_CHECK) that abort with file:line, and helpers that turn
// absl::Status into readable errors at the program boundary. User-facing errors use
// absl::Status instead; VT_CHECK is only for bugs.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace vt::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace vt::detail

#define VT_CHECK(cond)                                                              \
  do {                                                                              \
    if (!(cond)) ::vt::detail::check_failed(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)

#define VT_CHECK_MSG(cond, msg)                                                     \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::ostringstream vt_check_os_;                                              \
      vt_check_os_ << msg;                                                          \
      ::vt::detail::check_failed(__FILE__, __LINE__, #cond, vt_check_os_.str());    \
    }                                                                               \
  } while (0)

// Propagate a non-OK absl::Status from the current function.
#define VT_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::absl::Status vt_status_ = (expr);     \
    if (!vt_status_.ok()) return vt_status_; \
  } while (0)

#define VT_CONCAT_INNER_(a, b) a##b
#define VT_CONCAT_(a, b) VT_CONCAT_INNER_(a, b)
// VT_ASSIGN_OR_RETURN(auto x, StatusOr-expression);
#define VT_ASSIGN_OR_RETURN(lhs, expr) VT_ASSIGN_OR_RETURN_IMPL_(VT_CONCAT_(vt_sor_, __LINE__), lhs, expr)
#define VT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
