// OutputLock (see output_lock.h).
#include "core/output_lock.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/file_safety.h"

namespace vt {

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
}

absl::Status OutputLock::acquire(const std::string& lock_path, const std::string& out,
                                 const std::string& command) {
  path_ = lock_path;
  for (int attempt = 0; attempt < 100; ++attempt) {
    absl::StatusOr<int> fd = open_lock_file(path_);
    if (!fd.ok())
      return absl::Status(fd.status().code(),
                          absl::StrCat("cannot lock --out ", out, ": ", fd.status().message()));
    if (::flock(*fd, LOCK_EX | LOCK_NB) != 0) {
      // The holder writes "pid N on HOST" right after it takes the lock: a run that loses a race
      // by microseconds waits for that line (at most 2 s) so that it can name the winner.
      char buf[256] = {};
      ssize_t n = 0;
      for (int wait = 0; wait < 200; ++wait) {
        n = ::pread(*fd, buf, sizeof(buf) - 1, 0);
        if (n > 0 && buf[n - 1] == '\n') break;
        ::usleep(10000);
      }
      ::close(*fd);
      std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      const bool printable = !holder.empty() && std::all_of(holder.begin(), holder.end(), [](char c) {
        return c >= 0x20 && c < 0x7f;
      });
      return absl::FailedPreconditionError(absl::StrCat(
          "another vtrain ", command, printable ? absl::StrCat(" (", holder, ")") : "",
          " is writing --out ", out, " (it holds ", path_,
          "); wait for it to end or choose another --out"));
    }
    struct stat held {}, named {};
    if (::fstat(*fd, &held) == 0 && ::lstat(path_.c_str(), &named) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
      fd_ = *fd;
      char host[256] = {};
      ::gethostname(host, sizeof(host) - 1);
      const std::string who = absl::StrCat("pid ", ::getpid(), " on ", host, "\n");
      if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, who.data(), who.size(), 0);
      return absl::OkStatus();
    }
    ::close(*fd);  // the previous owner unlinked it as this run opened it: take the new one
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot lock --out ", out, ": ", path_, " keeps changing"));
}

}  // namespace vt
