// The exclusive lock of one output a command builds and swaps into place (`vtrain prepare
// --out DATADIR`, `vtrain export --out DIR`): flock on a lock file beside the output
// ("<out>.prepare-lock", "<out>.export-lock"), taken before anything is written and held for the
// whole job, so two runs never build or swap the same output at once. The file holds "pid P on
// HOST" of its owner, which a second run's refusal names. Released on destruction: the file is
// unlinked, then closed; a run that opened the old file just then sees that the name no longer
// is the file it locked and tries again. Never follows a symbolic link (open_lock_file).
#pragma once
#include <string>

#include "absl/status/status.h"

namespace vt {

class OutputLock {
 public:
  OutputLock() = default;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  ~OutputLock();

  // Locks `lock_path` for the output `out` of `vtrain <command>`. Refused while another process
  // holds it: "another vtrain COMMAND (pid P on HOST) is writing --out OUT (it holds LOCK); wait
  // for it to end or choose another --out". The lock file's folder must exist.
  absl::Status acquire(const std::string& lock_path, const std::string& out,
                       const std::string& command);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace vt
