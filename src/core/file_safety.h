// File-system rules for files vtrain did not make and directories others can write into
// (docs/design.md "Files vtrain reads and writes"):
//  - a name read from a data file (a shard in meta.json, a CORE bundle's dataset_uri) refers to
//    a file inside the directory holding it: never absolute, never with a `..` component, never
//    resolving (through symbolic links) outside it (`path_inside`);
//  - a file vtrain creates in a directory it writes into (a checkpoint directory: the `.tmp` of a
//    checkpoint, of `latest`, of tokenizer.json; the lock) is created as a new file, never
//    through a symbolic link planted under its name (`create_new_file`, `replace_file`,
//    `open_lock_file`);
//  - a failure to create a file says why in words (`write_error`: a read-only file system, no
//    permission), with the errno captured where the call failed.
#pragma once
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vt {

// `dir / name` when `name` (the value of `field` in the file `source`) names a file inside
// `dir`: not empty, not absolute, no `..` component, and (after symbolic links, as far as the
// path exists) inside the real `dir`. The error names `source`, `field`, the name and the rule.
absl::StatusOr<std::string> path_inside(const std::string& dir, const std::string& name,
                                        const std::string& source, const std::string& field);

// Whether `path` (which may not exist yet) lies inside the directory `dir` (after symbolic
// links as far as they exist). False when `dir` does not exist.
bool is_inside(const std::string& path, const std::string& dir);

// Creates `path` as a new, empty regular file and returns its descriptor (O_WRONLY, close-on-
// exec). Whatever had the name before (a stale temporary file, a symbolic link, which is removed,
// never followed) is unlinked first; a directory there is an error. Used for names vtrain owns
// (`*.tmp`), never for a file a user named.
absl::StatusOr<int> create_new_file(const std::string& path, unsigned mode = 0644);

// Writes `bytes` to `path` atomically: into a new `path.tmp` (create_new_file), fsync, then a
// rename over `path` (which replaces a link named `path`, never its target). `what` names the
// file in errors ("the latest pointer").
absl::Status replace_file(const std::string& path, std::string_view bytes, const std::string& what);

// Opens (creating it) a lock file without following a symbolic link: a link there is refused
// (the error names it); returns the descriptor (O_RDWR, close-on-exec).
absl::StatusOr<int> open_lock_file(const std::string& path);

// "cannot create FILE: the directory DIR is not writable (read-only file system)" and the like,
// for the errno `err` of a failed create in `dir`.
std::string write_error(const std::string& file, int err);

}  // namespace vt
