// HDF5 checkpoints: save (collective, raw threaded writes, atomic, verified) and load on any layout.
#include "checkpoint/checkpoint.h"

#include <chrono>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_plan.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/checksum.h"
#include "checkpoint/ckpt_comm.h"
#include "checkpoint/raw_io.h"
#include "core/check.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/muon.h"
#include "parallel/process_grid.h"

namespace vt {

using ckpt::CkptComm;
using ckpt::DatasetPlan;
using ckpt::Piece;

std::string SaveTimings::str() const {
  return absl::StrFormat("%swrite %.2f s (layout %.2f s, data %.2f s, checksums %.2f s within it), "
                         "verify %.2f s (fsync %.2f s beside it), rename %.2f s",
                         release > 0 ? absl::StrFormat("cache of older files dropped %.2f s, ", release) : "",
                         write, layout, data, checksum, verify, fsync, rename);
}

namespace {

// `cfg` with its derived fields filled (callers may pass a config before finalize()).
absl::StatusOr<ModelConfig> finalized(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  if (c.vocab_padded == 0) VT_RETURN_IF_ERROR(c.finalize());
  return c;
}

// fsync of a file or directory (best effort durability before the rename / after it).
void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Bytes the file system holding `dir` still accepts from this user (-1: unknown).
int64_t free_bytes(const std::string& dir) {
  struct statvfs v;
  if (::statvfs(dir.c_str(), &v) != 0) return -1;
  return static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
}

std::string mib(double bytes) { return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0)); }

nlohmann::json layout_json(const ProcessGrid* grid) {
  if (!grid) return {{"tp", 1}, {"dp", 1}, {"pp", 1}, {"world", 1}};
  const GridShape& g = grid->shape();
  return {{"tp", g.tp}, {"dp", g.dp}, {"pp", g.pp}, {"world", g.world()}};
}

absl::Status write_header(h5::File& f, const ModelConfig& cfg, const nlohmann::json& meta) {
  VT_RETURN_IF_ERROR(f.set_attr("format", kCheckpointFormat));
  VT_RETURN_IF_ERROR(f.set_attr("format_version", std::to_string(kCheckpointFormatVersion)));
  VT_RETURN_IF_ERROR(f.set_attr("library_version", kVtrainLibraryVersion));
  VT_RETURN_IF_ERROR(f.set_attr("checksum_algorithm", ckpt::kChecksumAlgorithm));
  VT_RETURN_IF_ERROR(f.set_attr("config", cfg.to_json().dump()));
  VT_RETURN_IF_ERROR(f.set_attr_i64("step", meta.at("step").get<int64_t>()));
  VT_RETURN_IF_ERROR(f.set_attr_i64("tokens", meta.at("tokens").get<int64_t>()));
  for (const char* k : {"loader_state", "rng_state", "extra", "layout"})
    VT_RETURN_IF_ERROR(f.set_attr(k, meta.at(k).dump()));
  return absl::OkStatus();
}

// The file's layout, made by one process (rank 0) with HDF5's POSIX driver: the header, then
// every dataset of `plan` allocated as one contiguous block (no data written yet). Returns the
// byte offset of each dataset's data, and reserves the whole file on the disk (fallocate: a full
// disk is found here, before any data is written; file systems without it are written as they
// are).
absl::StatusOr<std::vector<int64_t>> create_layout(const std::string& tmp, const ModelConfig& cfg,
                                                   const nlohmann::json& meta,
                                                   const std::vector<DatasetPlan>& plan) {
  std::vector<int64_t> offsets;
  {
    VT_ASSIGN_OR_RETURN(h5::File f, h5::File::create(tmp, MPI_COMM_NULL, /*dense_attributes=*/true));
    VT_RETURN_IF_ERROR(write_header(f, cfg, meta));
    for (const DatasetPlan& d : plan) {
      VT_ASSIGN_OR_RETURN(h5::Dataset ds, f.create_f32(d.path, d.global));
      const int64_t at = ds.contiguous_offset();
      if (at < 0)
        return absl::InternalError(absl::StrCat("HDF5 did not allocate ", d.path, " in ", tmp,
                                                " as one contiguous block"));
      offsets.push_back(at);
    }
    VT_RETURN_IF_ERROR(f.close());
  }
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_NOFOLLOW);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot reopen ", tmp, ": ", std::strerror(errno)));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const int err = size > 0 && ::fallocate(fd, 0, 0, size) != 0 ? errno : 0;
  ::close(fd);
  if (err != 0 && err != EOPNOTSUPP && err != ENOSYS)
    return absl::Status(err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                                       : absl::StatusCode::kInternal,
                        absl::StrCat("cannot reserve ", mib(static_cast<double>(size)), " for ",
                                     tmp, ": ", std::strerror(err)));
  return offsets;
}

// Writes this rank's owned boxes of every dataset at `offsets` of `tmp` (raw_io.h: threads, each
// chunk checksummed once written) and adds the checksum terms of what it wrote to `sums`.
absl::Status write_data(const std::string& tmp, const std::vector<DatasetPlan>& plan,
                        const std::vector<Piece>& pieces, const std::vector<int64_t>& offsets,
                        std::vector<uint64_t>& sums, SaveTimings& times) {
  std::vector<ckpt::RawRun> runs;
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].owner) {
      const Piece& p = pieces[plan[i].piece];
      ckpt::append_box_runs(runs, static_cast<int>(i), offsets[i], p.data, p.global, p.box);
    }
  if (runs.empty()) return absl::OkStatus();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_NOFOLLOW);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot open ", tmp, " for writing: ", std::strerror(errno)));
  absl::Status st = ckpt::write_runs(fd, tmp, runs, sums, ckpt::raw_io_threads(), &times.checksum);
  // close() reports write errors some file systems (NFS) keep until then.
  if (::close(fd) != 0 && st.ok())
    st = absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  return st;
}

// OK when `tmp` is still a regular file (not a link planted since it was created); HDF5 opens
// names, so this is checked before it reopens the file and before the rename.
absl::Status still_plain_file(const std::string& tmp) {
  struct stat st {};
  if (::lstat(tmp.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return absl::FailedPreconditionError(absl::StrCat(
        tmp, " is no longer the file this save created (replaced by a link or removed: another "
        "process writes this directory)"));
  return absl::OkStatus();
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Save phase 1: this rank's pieces, checked against the model's parameter list (agreed), then
// the plan of which rank writes which box of each dataset; every dataset must be covered.
absl::StatusOr<std::vector<DatasetPlan>> plan_save(const CkptComm& comm, const std::string& path,
                                                   const ModelConfig& cfg, const ParamStore& store,
                                                   const std::vector<NamedTensor>& extra,
                                                   std::vector<Piece>& pieces) {
  const std::vector<std::pair<std::string, Shape>> model = model_datasets(cfg);
  absl::StatusOr<std::vector<Piece>> mine = ckpt::local_pieces(&store, true, extra);
  absl::Status local = mine.status();
  if (local.ok()) {
    std::map<std::string, Shape> want(model.begin(), model.end());
    for (const Piece& p : *mine) {
      if (p.path.rfind("/model/", 0) != 0) continue;
      auto it = want.find(p.path);
      if (it == want.end())
        local = absl::InvalidArgumentError(absl::StrCat(
            "rank ", comm.rank(), " holds parameter ", p.path.substr(7),
            ", which the model of this config does not have"));
      else if (it->second != p.global)
        local = absl::InvalidArgumentError(absl::StrCat(
            p.path, " has global shape ", shape_str(p.global), " on rank ", comm.rank(),
            ", the model of this config says ", shape_str(it->second)));
    }
  } else {
    local = absl::InvalidArgumentError(absl::StrCat("rank ", comm.rank(), ": ", local.message()));
  }
  VT_RETURN_IF_ERROR(comm.agree(local));
  pieces = *std::move(mine);
  VT_ASSIGN_OR_RETURN(std::vector<DatasetPlan> plan, ckpt::plan_datasets(comm, pieces, model));
  std::vector<std::string> gaps;
  for (const DatasetPlan& d : plan)
    if (!d.covered)
      gaps.push_back(absl::StrCat(d.path, " (", d.held, " of ", shape_numel(d.global),
                                  " elements held)"));
  if (!gaps.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot save ", path, ": the ranks together do not hold all of ", absl::StrJoin(gaps, ", ")));
  return plan;
}

// The file system under a save: room for the file is checked before writing (data plus HDF5's
// metadata: a generous 1 MiB + 1%), so a full disk is a plain message, not a failure half-way
// through a collective write; any later failure says how full it is, the usual cause.
struct SaveRoom {
  const CkptComm& comm;
  std::string path, dir;
  double need = 0;

  SaveRoom(const CkptComm& c, const std::string& p, const std::vector<DatasetPlan>& plan)
      : comm(c), path(p), dir(std::filesystem::absolute(p).parent_path().string()) {
    double data_bytes = 0;
    for (const DatasetPlan& d : plan) data_bytes += 4.0 * static_cast<double>(shape_numel(d.global));
    need = data_bytes * 1.01 + (1 << 20);
  }
  // Agreed; VTRAIN_SKIP_SPACE_CHECK=1 (tests only) lets a save run into the full disk for real.
  absl::Status check() const {
    absl::Status room;
    const char* skip_check = std::getenv("VTRAIN_SKIP_SPACE_CHECK");
    if (comm.rank() == 0 && !(skip_check && std::string(skip_check) == "1")) {
      const int64_t have = free_bytes(dir);
      if (have >= 0 && need > static_cast<double>(have))
        room = absl::ResourceExhaustedError(absl::StrCat(
            "not enough space for checkpoint ", path, ": it needs about ", mib(need), ", the file "
            "system holding ", dir, " has ", mib(static_cast<double>(have)), " free"));
    }
    return comm.agree(room);
  }
  absl::Status noted(absl::Status st) const {
    if (st.ok() || comm.rank() != 0) return st;
    const int64_t have = free_bytes(dir);
    return absl::Status(st.code(), absl::StrCat(st.message(), " (the file system holding ", dir,
                                                " has ", mib(static_cast<double>(have)), " free",
                                                static_cast<double>(have) < need ? ": it is full" : "",
                                                ")"));
  }
};

// Save phase 2: the layout. Rank 0 creates "<path>.tmp" with the header and every dataset
// (contiguous, space reserved); every rank gets the datasets' byte offsets.
absl::StatusOr<std::vector<int64_t>> lay_out(const CkptComm& comm, const std::string& tmp,
                                             const ModelConfig& cfg, const nlohmann::json& meta_json,
                                             const std::vector<DatasetPlan>& plan,
                                             const SaveRoom& room) {
  std::vector<int64_t> offsets;
  absl::Status laid;
  if (comm.rank() == 0) {
    absl::StatusOr<std::vector<int64_t>> at = create_layout(tmp, cfg, meta_json, plan);
    laid = at.status();
    if (at.ok()) offsets = *std::move(at);
  }
  VT_RETURN_IF_ERROR(comm.agree(room.noted(laid)));
  const std::string text = comm.broadcast(nlohmann::json(offsets).dump());
  return nlohmann::json::parse(text).get<std::vector<int64_t>>();
}

// Save phase 3: every rank's data at the offsets of its datasets (no MPI-IO: the ranks write
// disjoint byte ranges of the file), then the checksum attributes (rank 0, from every rank's
// terms).
absl::Status write_and_sum(const CkptComm& comm, const std::string& tmp,
                           const std::vector<DatasetPlan>& plan, const std::vector<Piece>& pieces,
                           const std::vector<int64_t>& offsets, const SaveRoom& room,
                           SaveTimings& times) {
  std::vector<uint64_t> sums(plan.size(), 0);
  const double data_start = seconds_now();
  absl::Status written = write_data(tmp, plan, pieces, offsets, sums, times);
  times.data = seconds_now() - data_start;
  VT_RETURN_IF_ERROR(comm.agree(room.noted(written)));
  comm.sum(sums);
  absl::Status summed;
  if (comm.rank() == 0) {
    absl::Status plain = still_plain_file(tmp);
    absl::StatusOr<h5::File> f =
        plain.ok() ? h5::File::open_write(tmp) : absl::StatusOr<h5::File>(plain);
    summed = f.status();
    for (size_t i = 0; i < plan.size() && summed.ok(); ++i) {
      absl::StatusOr<h5::Dataset> ds = f->open_dataset(plan[i].path);
      summed = ds.ok() ? ds->set_attr("checksum", ckpt::checksum_hex(sums[i])) : ds.status();
    }
    if (f.ok()) {
      absl::Status closed = f->close();
      if (summed.ok()) summed = closed;
    }
  }
  return comm.agree(room.noted(summed));
}

// Save phase 4 (rank 0, agreed): the verified file takes the checkpoint's name. rename()
// replaces the name `path` (a link planted there included), never a link's target.
absl::Status rename_into_place(const CkptComm& comm, const std::string& tmp, const std::string& path) {
  absl::Status renamed;
  if (comm.rank() == 0) {
    std::error_code ec;
    renamed = still_plain_file(tmp);
    if (renamed.ok()) {
      std::filesystem::rename(tmp, path, ec);
      if (ec)
        renamed = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
      else
        fsync_path(std::filesystem::absolute(path).parent_path().string());
    }
  }
  return comm.agree(renamed);
}

// A save's phases: plan (what each rank writes), room, layout and write ("<path>.tmp"), verify (reopen and
// recompute every checksum from what the file holds while it is fsynced: only a durable,
// verified file becomes the checkpoint), rename. Each is agreed by every rank.
absl::Status save_impl(const CkptComm& comm, const std::string& path, const ModelConfig& model_cfg,
                       const ParamStore& store, const CheckpointMeta& meta,
                       const std::vector<NamedTensor>& extra, const ProcessGrid* grid,
                       SaveTimings& times) {
  const double start = seconds_now();
  double mark = start;
  auto lap = [&mark](double& into) {
    const double t = seconds_now();
    into += t - mark;
    mark = t;
  };
  VT_ASSIGN_OR_RETURN(const ModelConfig cfg, finalized(model_cfg));
  std::vector<Piece> pieces;
  VT_ASSIGN_OR_RETURN(const std::vector<DatasetPlan> plan,
                      plan_save(comm, path, cfg, store, extra, pieces));
  // Rank 0's training state (rank 0 writes the header).
  const nlohmann::json meta_json = nlohmann::json::parse(comm.broadcast(
      nlohmann::json{{"step", meta.step},
                     {"tokens", meta.tokens},
                     {"loader_state", meta.loader_state},
                     {"rng_state", meta.rng_state},
                     {"extra", meta.extra},
                     {"layout", layout_json(grid)}}
          .dump()));
  const std::string tmp = path + ".tmp";
  const SaveRoom room(comm, path, plan);
  VT_RETURN_IF_ERROR(room.check());

  const double layout_start = mark;
  absl::StatusOr<std::vector<int64_t>> offsets = lay_out(comm, tmp, cfg, meta_json, plan, room);
  times.layout = seconds_now() - layout_start;
  VT_RETURN_IF_ERROR(offsets.status());
  // From here on the file streams to the disk while it is written (every rank: each flushes what
  // its node's cache holds), and is fsynced beside the verify pass.
  ckpt::Flusher flusher(tmp);
  VT_RETURN_IF_ERROR(write_and_sum(comm, tmp, plan, pieces, *offsets, room, times));
  lap(times.write);
  {
    flusher.fsync();
    absl::StatusOr<ckpt::Opened> ck = ckpt::open_checkpoint(tmp, comm);
    absl::Status verified = comm.agree(ck.status());
    if (verified.ok()) verified = ckpt::verify_file(comm, *ck, tmp, nullptr, /*states=*/false);
    const absl::Status flushed = flusher.wait(&times.fsync);
    VT_RETURN_IF_ERROR(verified);
    VT_RETURN_IF_ERROR(comm.agree(room.noted(flushed)));
  }
  lap(times.verify);
  const absl::Status renamed = rename_into_place(comm, tmp, path);
  lap(times.rename);
  times.total = seconds_now() - start;
  return renamed;
}

}  // namespace

absl::Status save_checkpoint(const std::string& path, const ModelConfig& cfg,
                             const ParamStore& store, const CheckpointMeta& meta,
                             const std::vector<NamedTensor>& extra, const ProcessGrid* grid,
                             SaveTimings* timings) {
  VT_ASSIGN_OR_RETURN(CkptComm comm, CkptComm::from_grid(grid));
  SaveTimings local;
  absl::Status st = save_impl(comm, path, cfg, store, meta, extra, grid, timings ? *timings : local);
  if (!st.ok() && comm.rank() == 0) {
    std::error_code ec;
    std::filesystem::remove(path + ".tmp", ec);  // a failed save leaves nothing behind
  }
  return st;
}

namespace {

// Fills the pieces from the file (collective reads over the union of what the ranks ask for),
// then verifies the checksum of every dataset the ranks read whole between them.
absl::Status read_pieces(const CkptComm& comm, const ckpt::Opened& ck, const std::string& path,
                         const std::vector<Piece>& pieces) {
  // Every requested dataset must exist with the requested global shape.
  std::vector<std::string> problems;
  for (const Piece& p : pieces) {
    absl::StatusOr<h5::Dataset> ds = ck.file.open_dataset(p.path);
    if (!ds.ok()) {
      problems.push_back(absl::StrCat(p.path, " is missing"));
      continue;
    }
    absl::StatusOr<Shape> shape = ds->shape();
    if (!shape.ok() || !ds->is_f32())
      problems.push_back(absl::StrCat(p.path, " is not a float32 dataset"));
    else if (*shape != p.global)
      problems.push_back(absl::StrCat(p.path, " has shape ", shape_str(*shape),
                                      " in the checkpoint, the model wants ", shape_str(p.global)));
  }
  VT_RETURN_IF_ERROR(comm.agree(
      problems.empty() ? absl::OkStatus()
                       : absl::InvalidArgumentError(absl::StrCat(
                             path, " does not match the model: ", absl::StrJoin(problems, "; ")))));
  VT_ASSIGN_OR_RETURN(std::vector<DatasetPlan> plan, ckpt::plan_datasets(comm, pieces, {}));
  std::vector<uint64_t> sums(plan.size(), 0), nonfinite(plan.size(), 0);
  std::vector<std::string> stored(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const DatasetPlan& d = plan[i];
    absl::StatusOr<h5::Dataset> ds = ck.file.open_dataset(d.path);
    absl::Status st = ds.status();
    if (st.ok()) {
      stored[i] = ds->get_attr("checksum").value_or("");
      const Piece* p = d.piece >= 0 ? &pieces[d.piece] : nullptr;
      st = ds->read_slab(p ? &p->box : nullptr, p ? p->data : nullptr, h5::Transfer::kCollective);
      if (st.ok() && d.owner) {
        sums[i] = ckpt::checksum_box(p->data, p->global, p->box.start, p->box.count);
        const int64_t n = shape_numel(p->box.count);
        for (int64_t k = 0; k < n; ++k) nonfinite[i] += !std::isfinite(p->data[k]);
      }
    }
    VT_RETURN_IF_ERROR(comm.agree(st));
  }
  comm.sum(sums);
  comm.sum(nonfinite);
  std::vector<std::string> nonfinite_names;
  for (size_t i = 0; i < plan.size(); ++i)
    if (nonfinite[i] > 0) nonfinite_names.push_back(absl::StrCat(plan[i].path, " (", nonfinite[i], ")"));
  if (!nonfinite_names.empty())
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " holds non-finite values (NaN or inf) in ",
        absl::StrJoin(nonfinite_names, ", "),
        ": it was written after the run diverged; use an earlier checkpoint"));
  std::vector<std::string> bad;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!plan[i].covered || ck.format_version < 2) continue;  // format 1 has no checksums
    if (stored[i] != ckpt::checksum_hex(sums[i]))
      bad.push_back(absl::StrCat(plan[i].path, " (stored ", stored[i].empty() ? "none" : stored[i],
                                 ", data ", ckpt::checksum_hex(sums[i]), ")"));
  }
  if (!bad.empty())
    return absl::DataLossError(absl::StrCat("checkpoint ", path,
                                            " is corrupt: checksum mismatch in ", absl::StrJoin(bad, ", ")));
  return absl::OkStatus();
}

absl::Status architecture_check(const ckpt::Opened& ck, const ModelConfig& cfg,
                                const std::string& path) {
  std::vector<std::string> diffs = config_differences(ck.config, cfg);
  std::vector<std::string> missing, unexpected;
  std::set<std::string> want;
  for (const auto& [name, shape] : model_datasets(cfg)) {
    want.insert(name);
    if (!ck.file.exists(name)) missing.push_back(name.substr(7));
  }
  VT_ASSIGN_OR_RETURN(std::vector<std::string> names, ck.file.list_datasets());
  for (const std::string& n : names)
    if (n.rfind("/model/", 0) == 0 && !want.count(n)) unexpected.push_back(n.substr(7));
  if (diffs.empty() && missing.empty() && unexpected.empty()) return absl::OkStatus();
  std::string msg = absl::StrCat("checkpoint ", path, " is of another architecture than the model");
  if (!diffs.empty()) absl::StrAppend(&msg, "; config differs: ", absl::StrJoin(diffs, "; "));
  // At most 12 names per list.
  auto names_of = [](const std::vector<std::string>& v) {
    std::vector<std::string> head(v.begin(), v.begin() + std::min<size_t>(v.size(), 12));
    std::string s = absl::StrJoin(head, ", ");
    if (v.size() > head.size()) absl::StrAppend(&s, " and ", v.size() - head.size(), " more");
    return s;
  };
  if (!missing.empty())
    absl::StrAppend(&msg, "; missing from the checkpoint (", missing.size(), "): ", names_of(missing));
  if (!unexpected.empty())
    absl::StrAppend(&msg, "; in the checkpoint but not in the model (", unexpected.size(),
                    "): ", names_of(unexpected));
  return absl::InvalidArgumentError(msg);
}

absl::StatusOr<CheckpointMeta> load_impl(const std::string& path, const ModelConfig* cfg,
                                         const ParamStore* store, bool params,
                                         const std::vector<NamedTensor>& extra,
                                         const ProcessGrid* grid) {
  VT_ASSIGN_OR_RETURN(CkptComm comm, CkptComm::from_grid(grid));
  absl::StatusOr<ckpt::Opened> ck = ckpt::open_checkpoint(path, comm);
  VT_RETURN_IF_ERROR(comm.agree(ck.status()));
  if (cfg) {
    VT_ASSIGN_OR_RETURN(const ModelConfig c, finalized(*cfg));
    VT_RETURN_IF_ERROR(comm.agree(architecture_check(*ck, c, path)));
  }
  absl::StatusOr<std::vector<Piece>> pieces = ckpt::local_pieces(store, params, extra);
  VT_RETURN_IF_ERROR(comm.agree(pieces.status()));
  VT_RETURN_IF_ERROR(read_pieces(comm, *ck, path, *pieces));
  absl::StatusOr<CheckpointMeta> meta = ckpt::read_meta(ck->file, ck->format_version);
  VT_RETURN_IF_ERROR(comm.agree(meta.status()));
  return meta;
}

}  // namespace

absl::StatusOr<CheckpointMeta> load_checkpoint(const std::string& path, const ModelConfig& cfg,
                                               const ParamStore& store,
                                               const std::vector<NamedTensor>& extra,
                                               const ProcessGrid* grid) {
  return load_impl(path, &cfg, &store, true, extra, grid);
}

absl::Status load_checkpoint_params(const std::string& path, const ParamStore& store,
                                    const ProcessGrid* grid) {
  return load_impl(path, nullptr, &store, true, {}, grid).status();
}

absl::Status load_checkpoint_tensors(const std::string& path, const std::vector<NamedTensor>& extra,
                                     const ProcessGrid* grid, const ParamStore* store) {
  // The store only supplies shapes and splits here: its parameters are not read.
  return load_impl(path, nullptr, store, false, extra, grid).status();
}

absl::StatusOr<ModelConfig> read_checkpoint_config(const std::string& path) {
  VT_ASSIGN_OR_RETURN(ckpt::Opened ck, ckpt::open_checkpoint(path, CkptComm()));
  return ck.config;
}

absl::StatusOr<CheckpointMeta> read_checkpoint_meta(const std::string& path) {
  VT_ASSIGN_OR_RETURN(ckpt::Opened ck, ckpt::open_checkpoint(path, CkptComm()));
  return ckpt::read_meta(ck.file, ck.format_version);
}

}  // namespace vt
