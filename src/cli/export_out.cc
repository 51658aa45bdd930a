// Resolving, checking, locking and swapping `vtrain export --out` (see export_out.h).
#include "cli/export_out.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/file_safety.h"

namespace vt::cli {
namespace {
namespace fs = std::filesystem;

// `path` strictly below `root` (both absolute, normalized).
bool below(const fs::path& path, const fs::path& root) {
  const fs::path rel = path.lexically_relative(root);
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}

bool exists_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// Test hook (docs/design.md "Test hooks"): VTRAIN_TEST_EXPORT_KILL=staged|aside|swapped kills
// this process with SIGKILL at that point of the swap ("aside" and "fallback" take the path of
// file systems without an atomic exchange: rename the old export aside, the new one in).
bool test_hook(const char* point) {
  const char* v = std::getenv("VTRAIN_TEST_EXPORT_KILL");
  return v != nullptr && std::strcmp(v, point) == 0;
}
void kill_hook(const char* point) {
  if (test_hook(point)) {
    std::fflush(stdout);
    std::raise(SIGKILL);
  }
}
bool no_exchange() { return test_hook("aside") || test_hook("fallback"); }

// OK when `dir` holds nothing but the files of an export (and a __pycache__ of
// modeling_vtrain.py, which importing it makes); else the first foreign entry by name.
absl::Status holds_only_export(const fs::path& dir, const std::string& what) {
  const std::vector<std::string>& names = export_file_names();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool known = std::find(names.begin(), names.end(), name) != names.end() &&
                       it->symlink_status(ec).type() == fs::file_type::regular;
    bool cache = false;
    if (name == "__pycache__" && it->symlink_status(ec).type() == fs::file_type::directory) {
      cache = true;
      for (fs::directory_iterator c(it->path(), ec), cend; !ec && c != cend; c.increment(ec)) {
        const std::string n = c->path().filename().string();
        if (!absl::StartsWith(n, "modeling_vtrain.") || !absl::EndsWith(n, ".pyc")) cache = false;
      }
    }
    if (!known && !cache)
      return absl::FailedPreconditionError(absl::StrCat(
          what, " holds ", it->path().string(), ", which an export does not write; vtrain "
          "replaces only a directory holding an export (or nothing): move it away or choose "
          "another --out"));
  }
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat("cannot list ", dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

// --out made absolute without touching anything: trailing '/' and '.' dropped, the folder's
// symbolic links and '..' resolved; the last component kept as named (a link there is refused
// by the caller), unless it is '..' (then resolved too).
absl::StatusOr<fs::path> resolve_out(const std::string& flag) {
  if (flag.empty()) return absl::InvalidArgumentError("--out: an empty path");
  std::error_code ec;
  fs::path a = fs::absolute(flag, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out ", flag, ": ", ec.message()));
  while (a.has_relative_path() && (a.filename().empty() || a.filename() == "."))
    a = a.parent_path();
  if (a.filename() == "..") {
    a = fs::weakly_canonical(a, ec);
  } else if (a.has_relative_path()) {
    const fs::path name = a.filename();
    a = fs::weakly_canonical(a.parent_path(), ec) / name;
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out ", flag, ": ", ec.message()));
  while (a.has_relative_path() && a.filename().empty()) a = a.parent_path();
  if (!a.has_relative_path())
    return absl::InvalidArgumentError(absl::StrCat("--out ", flag, " names the root directory"));
  return a;
}

// Refuses an --out that is, contains or lies inside a checkpoint directory.
absl::Status check_not_checkpoints(const std::string& flag, const fs::path& out,
                                   const std::string& ckpt) {
  std::error_code ec;
  const fs::path ck = fs::weakly_canonical(fs::absolute(ckpt, ec), ec);
  const fs::path ckdir = ck.parent_path();
  const std::string named =
      flag == out.string() ? absl::StrCat("--out ", flag)
                           : absl::StrCat("--out ", flag, " (", out.string(), ")");
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        named, " ", why, "; an export never replaces, holds or lies among checkpoints: choose a "
        "directory outside every checkpoint directory"));
  };
  if (out == ck) return refuse(absl::StrCat("is the checkpoint --ckpt ", ckpt, " itself"));
  if (out == ckdir) return refuse(absl::StrCat("is the checkpoint's directory ", ckdir.string()));
  if (below(out, ckdir))
    return refuse(absl::StrCat("lies inside the checkpoint's directory ", ckdir.string()));
  if (below(ckdir, out))
    return refuse(absl::StrCat("contains the checkpoint's directory ", ckdir.string()));
  for (fs::path p = out;; p = p.parent_path()) {
    for (const char* mark : {"latest", ".vtrain.lock"})
      if (exists_no_follow(p / mark))
        return refuse(absl::StrCat(p == out ? "is" : "lies inside", " the checkpoint directory ",
                                   p.string(), " (it holds ", mark, ")"));
    if (p == p.parent_path()) break;
  }
  return absl::OkStatus();
}

// Removes a leftover of a stopped export (a folder named only by exports), naming it.
absl::Status remove_leftover(const fs::path& p, const std::string& why) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return absl::OkStatus();
  if (S_ISDIR(st.st_mode))
    VT_RETURN_IF_ERROR(holds_only_export(p, absl::StrCat("the leftover ", p.string())));
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot remove the leftover ", p.string(), ": ", ec.message()));
  std::printf("note: removed %s, %s\n", p.c_str(), why.c_str());
  return absl::OkStatus();
}

// fsync of every file in `dir` and of `dir` itself (an export on disk before it is swapped in).
absl::Status sync_folder(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    paths.push_back(it->path());
  paths.push_back(dir);
  for (const fs::path& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL)
      return absl::InternalError(absl::StrCat("cannot write ", p.string(), ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& export_file_names() {
  static const std::vector<std::string> names = {
      "model.safetensors",     "config.json",         "tokenizer.json",
      "tokenizer_config.json", "vtrain_tokenizer.json", "modeling_vtrain.py",
      "export_check.safetensors"};
  return names;
}

absl::StatusOr<std::unique_ptr<ExportTarget>> ExportTarget::open(const std::string& out_flag,
                                                                  const std::string& ckpt,
                                                                  bool force) {
  std::unique_ptr<ExportTarget> t(new ExportTarget());
  t->flag_ = out_flag;
  t->force_ = force;
  VT_ASSIGN_OR_RETURN(fs::path out, resolve_out(out_flag));
  t->out_ = out.string();
  const std::string named = out_flag == t->out_ ? absl::StrCat("--out ", out_flag)
                                                 : absl::StrCat("--out ", out_flag, " (", t->out_, ")");
  // Everything about the paths is checked before anything is made.
  VT_RETURN_IF_ERROR(check_not_checkpoints(out_flag, out, ckpt));
  struct stat st {};
  const bool existed = ::lstat(out.c_str(), &st) == 0;
  if (existed && !S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(absl::StrCat(
        named, " is ", file_kind(st.st_mode), "; an export is a directory, and vtrain replaces "
        "only a directory holding an earlier export: choose another --out"));
  if (existed && !force)
    return absl::AlreadyExistsError(
        absl::StrCat(named, " exists; choose another directory or pass --force"));

  const fs::path parent = out.parent_path(), name = out.filename();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat(named, ": ", write_error(out.string(), ec.value())));
  VT_RETURN_IF_ERROR(t->lock_.acquire(t->out_ + ".export-lock", out_flag, "export"));

  // A stopped export's leftovers, under the lock (no export of this --out runs now).
  t->staging_ = (parent / absl::StrCat(".", name.string(), ".export-new")).string();
  t->aside_ = (parent / absl::StrCat(".", name.string(), ".export-old")).string();
  if (exists_no_follow(t->aside_) && !exists_no_follow(out)) {
    VT_RETURN_IF_ERROR(holds_only_export(t->aside_, absl::StrCat("the leftover ", t->aside_)));
    if (::rename(t->aside_.c_str(), out.c_str()) != 0)
      return absl::InternalError(absl::StrCat("cannot put back the previous export ", t->aside_,
                                              " as ", t->out_, ": ", std::strerror(errno)));
    std::printf("note: put the previous export back at %s from %s (an export was stopped "
                "between renaming it aside and renaming the new one in)\n",
                t->out_.c_str(), t->aside_.c_str());
    if (!force)
      return absl::AlreadyExistsError(
          absl::StrCat(named, " exists; choose another directory or pass --force"));
  }
  VT_RETURN_IF_ERROR(remove_leftover(
      t->aside_, "the export an earlier export replaced (it was stopped before deleting it)"));
  VT_RETURN_IF_ERROR(remove_leftover(
      t->staging_, "left by an export that was stopped (unfinished, or the export it replaced)"));
  if (exists_no_follow(out)) VT_RETURN_IF_ERROR(holds_only_export(out, named));
  if (!fs::create_directory(t->staging_, ec) || ec)
    return absl::PermissionDeniedError(absl::StrCat(
        named, ": ", write_error(t->staging_, ec ? ec.value() : EEXIST)));
  return t;
}

ExportTarget::~ExportTarget() {
  if (installed_ || staging_.empty()) return;
  std::error_code ec;
  struct stat st {};
  if (::lstat(staging_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fs::remove_all(staging_, ec);
}

absl::Status ExportTarget::install() {
  VT_RETURN_IF_ERROR(sync_folder(staging_));
  const std::string named = flag_ == out_ ? absl::StrCat("--out ", flag_)
                                           : absl::StrCat("--out ", flag_, " (", out_, ")");
  struct stat st {};
  const bool exists = ::lstat(out_.c_str(), &st) == 0;
  // What is at --out now may have changed while the export was written: the same rules.
  if (exists && (!S_ISDIR(st.st_mode) || !force_))
    return absl::FailedPreconditionError(absl::StrCat(
        named, " appeared while exporting (", file_kind(st.st_mode), "); nothing replaced"));
  if (exists) VT_RETURN_IF_ERROR(holds_only_export(out_, named));
  kill_hook("staged");
  if (!exists) {
    if (::rename(staging_.c_str(), out_.c_str()) != 0)
      return absl::InternalError(absl::StrCat("cannot rename ", staging_, " to ", out_, ": ",
                                              std::strerror(errno)));
    installed_ = true;
    return absl::OkStatus();
  }
  // One atomic exchange where the file system has it: --out is the old export or the new one
  // at every moment; staging then holds the old one.
  if (!no_exchange() &&
      ::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, out_.c_str(), RENAME_EXCHANGE) == 0) {
    installed_ = true;
    kill_hook("swapped");
    std::error_code ec;
    fs::remove_all(staging_, ec);
    return absl::OkStatus();
  }
  if (!no_exchange() && errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return absl::InternalError(absl::StrCat("cannot exchange ", staging_, " and ", out_, ": ",
                                            std::strerror(errno)));
  // Without it: the old one aside, the new one in, the old one deleted (a kill between the two
  // renames leaves the old one whole aside; the next export puts it back).
  if (::rename(out_.c_str(), aside_.c_str()) != 0)
    return absl::InternalError(absl::StrCat("cannot rename the previous export ", out_, " to ",
                                            aside_, ": ", std::strerror(errno)));
  kill_hook("aside");
  if (::rename(staging_.c_str(), out_.c_str()) != 0) {
    const int err = errno;
    ::rename(aside_.c_str(), out_.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", staging_, " to ", out_, ": ",
                                            std::strerror(err), "; the previous export stays"));
  }
  installed_ = true;
  kill_hook("swapped");
  std::error_code ec;
  fs::remove_all(aside_, ec);
  return absl::OkStatus();
}

}  // namespace vt::cli
