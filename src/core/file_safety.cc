// Names from data files kept inside their directory; files created without following links;
// create errors in words; output files a user names written by temporary file and rename only
// over a regular file or nothing; whole-file reads of regular files of bounded size (see
// file_safety.h).
#include "core/file_safety.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace vt {
namespace fs = std::filesystem;

namespace {

// `p` made absolute with its symbolic links resolved as far as it exists.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p, ec).lexically_normal() : r;
}

bool under(const fs::path& path, const fs::path& root) {
  const fs::path rel = path.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

absl::StatusOr<std::string> path_inside(const std::string& dir, const std::string& name,
                                        const std::string& source, const std::string& field) {
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", field, " \"", name, "\" ", why, "; a data directory or bundle refers only "
        "to files inside itself (", dir, ")"));
  };
  if (name.empty()) return refuse("is empty");
  if (name.find('\0') != std::string::npos) return refuse("holds a NUL byte");
  const fs::path p(name);
  if (p.is_absolute()) return refuse("is an absolute path");
  for (const fs::path& part : p)
    if (part == "..") return refuse("has a '..' component");
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec)
    return absl::NotFoundError(absl::StrCat("cannot resolve the directory ", dir, " of ", source,
                                            ": ", ec.message()));
  const fs::path full = resolved(root / p);
  if (!under(full, root) || full == root)
    return refuse(absl::StrCat("resolves to ", full.string(), ", outside the directory (a symbolic link?)"));
  return (fs::path(dir) / p).string();
}

bool is_inside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) return false;
  return under(resolved(path), root);
}

std::string write_error(const std::string& file, int err) {
  const fs::path parent = fs::path(file).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  switch (err) {
    case EROFS:
      return absl::StrCat("cannot create ", file, ": the directory ", dir,
                          " is not writable (it is on a read-only file system)");
    case EACCES:
    case EPERM:
      return absl::StrCat("cannot create ", file, ": the directory ", dir,
                          " is not writable by this user (permission denied)");
    case ENOENT:
      return absl::StrCat("cannot create ", file, ": the directory ", dir, " does not exist");
    case ENOSPC:
    case EDQUOT:
      return absl::StrCat("cannot create ", file, ": the file system holding ", dir, " is full");
    default:
      return absl::StrCat("cannot create ", file, ": ", std::strerror(err));
  }
}

absl::StatusOr<int> create_new_file(const std::string& path, unsigned mode) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create ", path, ": a directory has that name; move it away"));
    // A stale temporary file of an interrupted run, or a link planted under the name: removed,
    // never written through.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      return absl::PermissionDeniedError(
          absl::StrCat("cannot remove the stale ", path, ": ", std::strerror(err)));
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        static_cast<mode_t>(mode));
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST || err == ELOOP)
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create ", path, ": something else created that name at the same time (another "
          "process writes this directory)"));
    return absl::Status(err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                                       : absl::StatusCode::kPermissionDenied,
                        write_error(path, err));
  }
  return fd;
}

namespace {

// Writes all of `bytes` to `fd`, fsyncs and closes it; 0 or the errno of the first failure (the
// descriptor is closed either way).
int write_sync_close(int fd, std::string_view bytes) {
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0 && errno != EINVAL) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

}  // namespace

absl::Status replace_file(const std::string& path, std::string_view bytes, const std::string& what) {
  const std::string tmp = path + ".tmp";
  absl::StatusOr<int> fd = create_new_file(tmp);
  if (!fd.ok())
    return absl::Status(fd.status().code(), absl::StrCat("cannot write ", what, ": ", fd.status().message()));
  int err = write_sync_close(*fd, bytes);
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", what, " ", path, ": ", std::strerror(err),
                                            err == ENOSPC ? " (the disk is full)" : ""));
  }
  return absl::OkStatus();
}

std::string file_kind(unsigned st_mode) {
  const mode_t m = static_cast<mode_t>(st_mode);
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

absl::Status check_output_file(const std::string& path, const std::string& flag) {
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", why));
  };
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": an empty path"));
  const fs::path p(path);
  const std::string last = p.filename().string();
  if (path.back() == '/' || last == "." || last == "..")
    return refuse("names a directory; give the path of a file to write");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode)) return absl::OkStatus();
    return refuse(absl::StrCat(
        "is ", file_kind(st.st_mode), "; vtrain writes an output file only as a regular file (a "
        "new one, or replacing one), never over or through ", file_kind(st.st_mode),
        ": choose a file path"));
  }
  const int err = errno;
  const std::string dir = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
  if (err == ENOTDIR) return refuse(absl::StrCat("the folder ", dir, " is not a directory"));
  if (err != ENOENT) return refuse(std::strerror(err));
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return refuse(absl::StrCat("the folder ", dir, " does not exist"));
  return absl::OkStatus();
}

absl::Status check_outside(const std::string& path, const std::string& flag,
                           const std::vector<std::pair<std::string, std::string>>& dirs) {
  for (const auto& [dir, named] : dirs)
    if (!dir.empty() && is_inside(path, dir))
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", path, " is inside the ", named, " directory ", dir, "; vtrain never writes ",
          flag, " among a run's data or checkpoints: choose a path outside it"));
  return absl::OkStatus();
}

absl::Status write_output_file(const std::string& path, std::string_view bytes,
                               const std::string& flag) {
  if (absl::Status st = check_output_file(path, flag); !st.ok()) return st;
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  absl::StatusOr<int> fd = create_new_file(tmp);
  if (!fd.ok())
    return absl::Status(fd.status().code(),
                        absl::StrCat("cannot write ", flag, " ", path, ": ", fd.status().message()));
  int err = write_sync_close(*fd, bytes);
  if (err == 0) {
    // The name may have been replaced while the file was written: the same rule at the rename.
    if (absl::Status again = check_output_file(path, flag); !again.ok()) {
      ::unlink(tmp.c_str());
      return again;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  }
  if (err != 0) {
    ::unlink(tmp.c_str());
    return absl::Status(
        err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                       : absl::StatusCode::kInternal,
        absl::StrCat("cannot write ", flag, " ", path, ": ", std::strerror(err),
                     err == ENOSPC || err == EDQUOT ? " (the file system is full); nothing was "
                                                      "written"
                                                    : ""));
  }
  return absl::OkStatus();
}

int append_whole(int fd, std::string_view bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno;
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (n == 0) {
      err = EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err != 0 && done > 0) {  // no torn record stays
    (void)!::ftruncate(fd, st.st_size);
    ::lseek(fd, st.st_size, SEEK_SET);
  }
  return err;
}

absl::StatusOr<std::string> read_regular_file(const std::string& path, int64_t max_bytes,
                                              const std::string& what) {
  auto refuse = [&](absl::StatusCode code, const std::string& why) {
    return absl::Status(code, absl::StrCat(what, " ", path, ": ", why));
  };
  // O_NONBLOCK: opening a FIFO with no writer returns at once (and is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return refuse(err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kPermissionDenied,
                  err == ENOENT ? std::string("no such file") : absl::StrCat("cannot read it: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned mode = st.st_mode;
    ::close(fd);
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("is ", file_kind(mode), ", not a regular file"));
  }
  auto too_large = [&](const std::string& size) {
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("is ", size, " bytes, more than the ", max_bytes,
                               " such a file can hold; is it the right file?"));
  };
  if (st.st_size > max_bytes) {
    ::close(fd);
    return too_large(std::to_string(st.st_size));
  }
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      const int err = errno;
      ::close(fd);
      return refuse(absl::StatusCode::kInternal, absl::StrCat("cannot read it: ", std::strerror(err)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > max_bytes) {  // it grew while read
      ::close(fd);
      return too_large(absl::StrCat("over ", max_bytes));
    }
  }
  ::close(fd);
  return text;
}

absl::StatusOr<int> open_lock_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) {
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) return fd;
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("the lock file ", path, " is not a regular file; remove it"));
  }
  const int err = errno;
  if (err == ELOOP)
    return absl::FailedPreconditionError(absl::StrCat(
        "the lock file ", path, " is a symbolic link; vtrain does not follow links in a directory "
        "it writes: remove it"));
  return absl::Status(err == EROFS || err == EACCES || err == EPERM
                          ? absl::StatusCode::kPermissionDenied
                          : absl::StatusCode::kInternal,
                      write_error(path, err));
}

}  // namespace vt
