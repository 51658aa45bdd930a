// Where `vtrain export` writes (docs/usage.md "Exporting a model"): --out resolved before
// anything is touched, refused by name when it is, contains or lies inside a checkpoint
// directory (the --ckpt's, or any holding `latest` or `.vtrain.lock`), when it is not a
// directory, or (with --force) when it holds anything an export does not write; one export per
// --out at a time (an OutputLock, "<out>.export-lock"); the new export built in a staging folder
// beside --out and swapped in only once complete (an atomic exchange where the file system has
// one; else the old one renamed aside, the new one in, then the old one deleted). A kill at any
// moment leaves the old or the new export whole at --out or, between the two renames, the old
// one aside, which the next export puts back; every leftover is named by the next export.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/output_lock.h"

namespace vt::cli {

// The files an export writes (cmd_export.cc): a directory holding only these (or nothing) is
// the only kind --force replaces.
const std::vector<std::string>& export_file_names();

class ExportTarget {
 public:
  // Resolves and checks --out (`out_flag`) against the checkpoint `ckpt`, takes the lock, deals
  // with a killed export's leftovers (naming each on stdout) and makes a fresh staging folder.
  static absl::StatusOr<std::unique_ptr<ExportTarget>> open(const std::string& out_flag,
                                                            const std::string& ckpt, bool force);
  ~ExportTarget();  // removes the staging folder unless installed

  // The folder to write the export into.
  const std::string& staging() const { return staging_; }
  // The resolved --out.
  const std::string& out() const { return out_; }
  // Puts the complete export in staging() at --out, replacing an earlier export.
  absl::Status install();

 private:
  ExportTarget() = default;
  std::string flag_, out_, staging_, aside_;
  bool force_ = false, installed_ = false;
  OutputLock lock_;
};

}  // namespace vt::cli
