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
//    permission), with the errno captured where the call failed;
//  - a file a user names as output (`--out FILE` of any command) is written to a temporary
//    file beside it and renamed over it, only over a regular file or nothing: a directory, a
//    symbolic link, a device, a FIFO or a socket under that name is refused by name, never
//    replaced or written through (`check_output_file`, `write_output_file`);
//  - a file a user names as input that vtrain reads whole (plan's --calibrate, --gemm-curve) is
//    a regular file of bounded size: a directory, FIFO, device or oversized file is refused by
//    name before a byte is read (`read_regular_file`).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// Whether `path` may be written as an output file named by `flag` ("--out"): it does not exist
// and its folder is an existing directory, or it is a regular file (not a symbolic link, not a
// directory, device, FIFO or socket). The error names the flag, the path and what is there.
// Reads only.
absl::Status check_output_file(const std::string& path, const std::string& flag);

// Refuses an output `path` named by `flag` that lies inside one of `dirs` (directory, the
// flag or words that named it: "--data", "the checkpoint's"; empty directories skipped): vtrain
// never writes an output among a run's data or checkpoints. Reads only.
absl::Status check_outside(const std::string& path, const std::string& flag,
                           const std::vector<std::pair<std::string, std::string>>& dirs);

// Writes `bytes` as the output file `path` named by `flag`: check_output_file, then a new
// temporary file beside it (unique to this process), fsync, the check again (the name may have
// changed meanwhile) and a rename over `path`. A failure (a full disk, say) leaves `path` as it
// was and no temporary file behind; the error names the flag and the path.
absl::Status write_output_file(const std::string& path, std::string_view bytes,
                               const std::string& flag);

// The whole of the regular file `path` (named by `what`, "--calibrate"), at most `max_bytes`:
// a directory, FIFO, device or socket, a file larger than that, or one that cannot be opened is
// refused by name (a FIFO is opened without blocking and refused; nothing is read from it).
absl::StatusOr<std::string> read_regular_file(const std::string& path, int64_t max_bytes,
                                              const std::string& what);

// Appends `bytes` to the open file `fd` (O_APPEND) whole or not at all: on a failed or short
// write the file is cut back to its size before (ftruncate), so a reader never sees a torn
// record. 0 or the errno of the failure (ENOSPC: the file system is full).
int append_whole(int fd, std::string_view bytes);

// What is at `st` in words ("a directory", "a character device", "a symbolic link", ...).
std::string file_kind(unsigned st_mode);

// "cannot create FILE: the directory DIR is not writable (read-only file system)" and the like,
// for the errno `err` of a failed create in `dir`.
std::string write_error(const std::string& file, int err);

}  // namespace vt
