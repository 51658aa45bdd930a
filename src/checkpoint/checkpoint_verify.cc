// Checkpoint header reading, whole-file verification and inspection (see checkpoint_verify.h).
#include "checkpoint/checkpoint_verify.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checksum.h"
#include "checkpoint/raw_io.h"
#include "core/check.h"

namespace vt {
namespace ckpt {

// Elements of `shape`, or -1 when the count passes 2^62 (a crafted header may declare anything).
int64_t safe_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

// A dataset may decompress to at most this many times its stored bytes (deflate's limit is
// about 1032:1), plus a little for datasets too small to be allocated at all.
constexpr int64_t kMaxExpansion = 1100;
constexpr int64_t kUnallocatedSlack = int64_t{1} << 16;

std::string storage_problem(const std::string& name, const h5::Dataset& ds, const Shape& shape,
                            int64_t file_bytes) {
  const int64_t n = safe_numel(shape);
  if (n < 0) return absl::StrCat(name, " declares shape ", shape_str(shape), ", above 2^62 elements");
  const int64_t stored = ds.storage_bytes();
  if (stored > file_bytes)
    return absl::StrCat(name, " claims ", stored, " bytes of storage, more than the file's ",
                        file_bytes);
  if (n > (stored * kMaxExpansion + kUnallocatedSlack) / 4)
    return absl::StrCat(name, " declares shape ", shape_str(shape), " (", n,
                        " floats) but the file holds only ", stored,
                        " bytes of it (a dataset may expand at most ", kMaxExpansion,
                        "x over its stored bytes)");
  return "";
}

absl::StatusOr<Opened> open_checkpoint(const std::string& path, const CkptComm& comm) {
  absl::Status exists = std::filesystem::is_regular_file(path)
                            ? absl::OkStatus()
                            : absl::NotFoundError(absl::StrCat("no checkpoint file ", path));
  VT_RETURN_IF_ERROR(comm.agree(exists));
  absl::StatusOr<h5::File> f = h5::File::open_read(path, comm.comm());
  VT_RETURN_IF_ERROR(comm.agree(f.status()));
  Opened ck{*std::move(f), 0, {}};
  auto fmt = ck.file.get_attr("format");
  if (!fmt.ok() || *fmt != kCheckpointFormat)
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is an HDF5 file but not a vtrain checkpoint (its 'format' attribute is ",
        fmt.ok() ? "'" + *fmt + "'" : "missing", ", expected '", kCheckpointFormat, "')"));
  auto ver = ck.file.get_attr("format_version");
  if (!ver.ok() || !absl::SimpleAtoi(*ver, &ck.format_version) || ck.format_version < 1)
    return absl::DataLossError(absl::StrCat(path, ": missing or malformed format_version attribute"));
  if (ck.format_version > kCheckpointFormatVersion)
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has checkpoint format version ", ck.format_version,
        ", newer than this build of vtrain reads (up to ", kCheckpointFormatVersion,
        "); load it with the newer vtrain that wrote it"));
  auto js = ck.file.get_attr("config");
  if (!js.ok()) return absl::DataLossError(absl::StrCat(path, ": no config attribute"));
  nlohmann::json j = nlohmann::json::parse(*js, nullptr, false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": config attribute is not JSON"));
  absl::StatusOr<ModelConfig> cfg = ModelConfig::from_json(j);
  if (!cfg.ok())
    return absl::DataLossError(absl::StrCat(path, ": bad config attribute: ", cfg.status().message()));
  ck.config = *std::move(cfg);
  // Format 1 (no checksums) is older than the attributes format 2 added: a file with them that
  // says 1 would skip every checksum.
  if (ck.format_version == 1) {
    const std::vector<std::string> attrs = ck.file.attr_names();
    for (const char* v2 : {"checksum_algorithm", "step", "tokens"})
      if (std::find(attrs.begin(), attrs.end(), v2) != attrs.end())
        return absl::DataLossError(absl::StrCat(
            path, ": format_version says 1 (no checksums) but the file has format 2's '", v2,
            "' attribute; the format_version attribute was altered"));
  }
  // The training state's attributes are checked here too, so that every reader names the file.
  if (absl::StatusOr<CheckpointMeta> meta = read_meta(ck.file, ck.format_version); !meta.ok())
    return absl::DataLossError(absl::StrCat(path, ": ", meta.status().message()));
  // The parameters the config implies against what the file holds, before anyone allocates a
  // model of this config: same shape, float32, and the data really stored in the file.
  std::error_code ec;
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  std::vector<std::string> problems;
  for (const auto& [name, shape] : model_datasets(ck.config)) {
    if (!ck.file.exists(name)) continue;  // named by the architecture check / verify
    absl::StatusOr<h5::Dataset> ds = ck.file.open_dataset(name);
    absl::StatusOr<Shape> held = ds.ok() ? ds->shape() : ds.status();
    if (!held.ok()) {
      problems.push_back(absl::StrCat(name, ": ", held.status().message()));
    } else if (*held != shape) {
      problems.push_back(absl::StrCat(name, " has shape ", shape_str(*held), ", the config implies ",
                                      shape_str(shape)));
    } else if (!ds->is_f32()) {
      problems.push_back(absl::StrCat(name, " is not a float32 dataset"));
    } else if (std::string p = storage_problem(name, *ds, shape, ec ? std::numeric_limits<int64_t>::max() : file_bytes);
               !p.empty()) {
      problems.push_back(p);
    }
    if (problems.size() >= 8) break;
  }
  if (!problems.empty())
    return absl::DataLossError(absl::StrCat(path, ": the datasets do not match the config attribute: ",
                                            absl::StrJoin(problems, "; ")));
  return ck;
}

absl::StatusOr<CheckpointMeta> read_meta(const h5::File& f, int format_version) {
  CheckpointMeta m;
  m.format_version = format_version;
  auto json_attr = [&](const char* name) -> absl::StatusOr<nlohmann::json> {
    auto s = f.get_attr(name);
    if (!s.ok()) return nlohmann::json();
    nlohmann::json j = nlohmann::json::parse(*s, nullptr, false);
    if (j.is_discarded()) return absl::DataLossError(absl::StrCat("attribute ", name, " is not JSON"));
    return j;
  };
  // step and tokens as the flags declare them (--steps up to 1e12; tokens are int64).
  auto check_counts = [&m]() -> absl::Status {
    if (m.step < 0 || m.step > int64_t{1000000000000})
      return absl::DataLossError(absl::StrCat("attribute step ", m.step,
                                              " is out of range: expected an integer in [0, "
                                              "1000000000000] (the range of --steps)"));
    if (m.tokens < 0)
      return absl::DataLossError(absl::StrCat("attribute tokens ", m.tokens,
                                              " is out of range: expected an integer >= 0"));
    return absl::OkStatus();
  };
  if (format_version == 1) {
    VT_ASSIGN_OR_RETURN(nlohmann::json j, json_attr("meta"));
    if (!j.is_object() && !j.is_null())
      return absl::DataLossError("attribute meta is not a JSON object");
    try {  // a field of the wrong type throws
      m.step = j.value("step", int64_t{0});
      m.tokens = j.value("tokens", int64_t{0});
      m.loader_state = j.value("loader_state", nlohmann::json());
      m.extra = j.value("extra", nlohmann::json());
    } catch (const nlohmann::json::exception& e) {
      return absl::DataLossError(absl::StrCat("attribute meta: ", e.what()));
    }
    m.library_version = "vtrain (format 1)";
    m.layout = {{"tp", 1}, {"dp", 1}, {"pp", 1}, {"world", 1}};
    VT_RETURN_IF_ERROR(check_counts());
    return m;
  }
  VT_ASSIGN_OR_RETURN(m.step, f.get_attr_i64("step"));
  VT_ASSIGN_OR_RETURN(m.tokens, f.get_attr_i64("tokens"));
  VT_ASSIGN_OR_RETURN(m.loader_state, json_attr("loader_state"));
  VT_ASSIGN_OR_RETURN(m.rng_state, json_attr("rng_state"));
  VT_ASSIGN_OR_RETURN(m.extra, json_attr("extra"));
  VT_ASSIGN_OR_RETURN(m.layout, json_attr("layout"));
  m.library_version = f.get_attr("library_version").value_or("");
  VT_RETURN_IF_ERROR(check_counts());
  return m;
}

namespace {

// What verify_file's structural pass found.
struct Structure {
  size_t params = 0;       // parameters the config has
  bool has_states = false; // the file holds optimizer states
  size_t states = 0;       // the states a resume reads (counted when they are checked)
};

// Verify phase 1, the structure as a load checks it: /model against the config's parameter list
// (shapes were checked when the file was opened), and the optimizer states a resume reads: all
// of them with their parameters' shapes, or none (a model-only checkpoint evaluates and
// generates).
Structure check_structure(const Opened& ck, const std::vector<std::string>& names,
                          bool check_states, std::vector<std::string>& problems) {
  Structure out;
  std::set<std::string> present(names.begin(), names.end());
  std::set<std::string> expected;
  for (const auto& [name, shape] : model_datasets(ck.config)) {
    expected.insert(name);
    if (!present.count(name)) problems.push_back(absl::StrCat("missing parameter ", name));
  }
  out.params = expected.size();
  for (const std::string& n : names)
    if (n.rfind("/model/", 0) == 0 && !expected.count(n))
      problems.push_back(absl::StrCat("unexpected parameter ", n));
  out.has_states = std::any_of(names.begin(), names.end(), [](const std::string& n) {
    return n.rfind("/optim/", 0) == 0;
  });
  if (!out.has_states || !check_states) return out;
  std::set<std::string> want_states;
  std::vector<std::string> missing_states;
  for (const auto& [name, shape] :
       optimizer_datasets(ck.config, matrices_in_adamw(ck.config, present))) {
    want_states.insert(name);
    ++out.states;
    if (!present.count(name)) {
      missing_states.push_back(name);
      continue;
    }
    absl::StatusOr<h5::Dataset> ds = ck.file.open_dataset(name);
    absl::StatusOr<Shape> held = ds.ok() ? ds->shape() : ds.status();
    if (held.ok() && *held != shape)
      problems.push_back(absl::StrCat("optimizer state ", name, " has shape ", shape_str(*held),
                                      ", its parameter ", shape_str(shape)));
  }
  if (!missing_states.empty())
    problems.push_back(absl::StrCat(
        "missing optimizer state", missing_states.size() > 1 ? "s " : " ",
        absl::StrJoin(missing_states.begin(),
                      missing_states.begin() + std::min<size_t>(missing_states.size(), 8), ", "),
        missing_states.size() > 8 ? absl::StrCat(" and ", missing_states.size() - 8, " more") : "",
        " (a resume reads every state of every parameter)"));
  for (const std::string& n : names)
    if (n.rfind("/optim/", 0) == 0 && !want_states.count(n))
      problems.push_back(absl::StrCat("unexpected optimizer state ", n));
  return out;
}

constexpr int64_t kBlock = int64_t{1} << 22;  // floats per HDF5 read

// Verify phase 2 for a dataset not stored as one contiguous block (a file from another writer):
// this rank's rows read through HDF5, several per read, or a 2-D row in column pieces (never
// more than kBlock floats in memory at once), into its checksum terms and non-finite count.
// Returns a read error; a shape it cannot read this way is a problem instead.
absl::Status sum_by_rows(const CkptComm& comm, h5::Dataset& ds, const std::string& name,
                         const Shape& shape, uint64_t& sum, uint64_t& nonfinite,
                         std::vector<float>& buf, std::vector<std::string>& problems) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t row = shape.empty() ? 1 : shape_numel(shape) / std::max<int64_t>(rows, 1);
  if (row > kBlock && shape.size() != 2) {
    problems.push_back(absl::StrCat(name, " has rows of ", row, " floats in ", shape.size(),
                                    " dimensions; vtrain reads such rows only from 2-D datasets "
                                    "or contiguous storage"));
    return absl::OkStatus();
  }
  const int64_t r0 = rows * comm.rank() / comm.size(), r1 = rows * (comm.rank() + 1) / comm.size();
  const int64_t step = std::max<int64_t>(1, kBlock / std::max<int64_t>(row, 1));
  const int64_t piece = std::min(row, kBlock);
  for (int64_t r = r0; r < r1; r += step) {
    const int64_t n = std::min(step, r1 - r);
    for (int64_t c = 0; c < row; c += piece) {
      const int64_t w = row > kBlock ? std::min(piece, row - c) : row;
      h5::Slab box;
      if (!shape.empty()) {
        box.start.assign(shape.size(), 0);
        box.count = shape;
        box.start[0] = r;
        box.count[0] = n;
        if (row > kBlock) {
          box.start[1] = c;
          box.count[1] = w;
        }
      }
      buf.resize(n * w);
      VT_RETURN_IF_ERROR(ds.read_slab(&box, buf.data(), h5::Transfer::kIndependent));
      sum += ckpt::checksum_run(buf.data(), r * row + c, n * w);
      for (float v : buf) nonfinite += !std::isfinite(v);
      if (row <= kBlock) break;
    }
  }
  return absl::OkStatus();
}

// Verify phase 3: the contiguous datasets' slices of this rank, read raw in large reads on a few
// threads (raw_io.h).
absl::Status sum_raw(const std::string& path, std::vector<RawRun>& raw, std::vector<uint64_t>& sums,
                     std::vector<uint64_t>& nonfinite) {
  if (raw.empty()) return absl::OkStatus();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::DataLossError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  absl::Status st = read_runs(fd, path, raw, sums, nonfinite, raw_io_threads());
  ::close(fd);
  return st;
}

std::string verify_summary(const Opened& ck, const Structure& st) {
  return absl::StrCat(
      ck.format_version >= 2
          ? "every dataset matches its checksum and holds finite values"
          : "format 1 stores no checksums: the structure was checked and every dataset holds "
            "finite values, the data itself could not be checked",
      "; ", st.params, " parameters",
      st.has_states ? absl::StrCat(" and their ", st.states, " optimizer states (resumable)")
                    : std::string(" and no optimizer states (it evaluates and generates; a resume "
                                  "needs the states)"));
}

}  // namespace

// The phases: structure, then every dataset split evenly over the ranks and summed (contiguous
// ones raw, others through HDF5 by rows), then the sums and non-finite counts combined over the
// ranks and compared with the stored checksums. Every return is agreed on by all ranks (callers
// go on with collectives).
absl::Status verify_file(const CkptComm& comm, const Opened& ck, const std::string& path,
                         std::string* summary, bool check_states) {
  std::vector<std::string> problems;
  absl::StatusOr<std::vector<std::string>> listed = ck.file.list_datasets();
  VT_RETURN_IF_ERROR(comm.agree(listed.status()));
  const std::vector<std::string>& names = *listed;
  const Structure structure = check_structure(ck, names, check_states, problems);
  std::error_code size_ec;
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, size_ec));
  std::vector<uint64_t> sums(names.size(), 0), nonfinite(names.size(), 0);
  std::vector<std::string> stored(names.size());
  std::vector<RawRun> raw;
  std::vector<float> buf;
  absl::Status read_error;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StatusOr<h5::Dataset> opened = ck.file.open_dataset(names[i]);
    absl::StatusOr<Shape> shaped = opened.ok() ? opened->shape() : opened.status();
    if (!shaped.ok()) {
      problems.push_back(absl::StrCat(names[i], ": ", shaped.status().message()));
      continue;
    }
    h5::Dataset& ds = *opened;
    const Shape& shape = *shaped;
    if (!ds.is_f32()) {
      problems.push_back(absl::StrCat(names[i], " is not a float32 dataset"));
      continue;
    }
    if (std::string p = storage_problem(names[i], ds, shape,
                                        size_ec ? std::numeric_limits<int64_t>::max() : file_bytes);
        !p.empty()) {
      problems.push_back(p);
      continue;
    }
    if (ck.format_version >= 2) {
      auto c = ds.get_attr("checksum");
      if (!c.ok()) {
        problems.push_back(absl::StrCat(names[i], absl::IsNotFound(c.status()) ? " has no checksum attribute"
                                                                              : absl::StrCat(": ", c.status().message())));
        continue;
      }
      stored[i] = *c;
    }
    if (!read_error.ok()) continue;
    if (const int64_t at = ds.contiguous_offset(); at >= 0) {
      const int64_t n = shape_numel(shape);
      const int64_t lo = n * comm.rank() / comm.size(), hi = n * (comm.rank() + 1) / comm.size();
      if (hi > lo) raw.push_back({static_cast<int>(i), at + 4 * lo, lo, hi - lo, nullptr});
      continue;
    }
    read_error = sum_by_rows(comm, ds, names[i], shape, sums[i], nonfinite[i], buf, problems);
  }
  if (read_error.ok()) read_error = sum_raw(path, raw, sums, nonfinite);
  VT_RETURN_IF_ERROR(comm.agree(read_error.ok() ? read_error
                                                : absl::DataLossError(absl::StrCat(
                                                      path, " is unreadable: ", read_error.message()))));
  comm.sum(sums);
  comm.sum(nonfinite);
  for (size_t i = 0; i < names.size(); ++i)
    if (nonfinite[i] > 0)
      problems.push_back(absl::StrCat(names[i], " holds ", nonfinite[i],
                                      " non-finite value(s) (NaN or inf): the run had diverged "
                                      "when it was written"));
  if (ck.format_version >= 2) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (stored[i].empty()) continue;
      if (stored[i] != checksum_hex(sums[i]))
        problems.push_back(absl::StrCat(names[i], ": checksum mismatch (stored ", stored[i],
                                        ", data ", checksum_hex(sums[i]), ")"));
    }
  }
  if (summary) *summary = verify_summary(ck, structure);
  return comm.agree(problems.empty() ? absl::OkStatus()
                                     : absl::DataLossError(absl::StrCat(
                                           "checkpoint ", path, " is corrupt: ",
                                           absl::StrJoin(problems, "; "))));
}

}  // namespace ckpt

absl::Status verify_checkpoint(const std::string& path, const ProcessGrid* grid,
                               std::string* summary) {
  VT_ASSIGN_OR_RETURN(ckpt::CkptComm comm, ckpt::CkptComm::from_grid(grid));
  absl::StatusOr<ckpt::Opened> ck = ckpt::open_checkpoint(path, comm);
  VT_RETURN_IF_ERROR(comm.agree(ck.status()));
  return ckpt::verify_file(comm, *ck, path, summary);
}

absl::StatusOr<CheckpointInfo> inspect_checkpoint(const std::string& path) {
  VT_ASSIGN_OR_RETURN(ckpt::Opened ck, ckpt::open_checkpoint(path, ckpt::CkptComm()));
  CheckpointInfo info;
  info.path = path;
  info.format_version = ck.format_version;
  info.config = ck.config;
  VT_ASSIGN_OR_RETURN(info.meta, ckpt::read_meta(ck.file, ck.format_version));
  for (const std::string& name : ck.file.attr_names()) {
    auto s = ck.file.get_attr(name);
    if (s.ok()) {
      info.attributes.push_back({name, *s});
      continue;
    }
    auto i = ck.file.get_attr_i64(name);
    info.attributes.push_back({name, i.ok() ? std::to_string(*i) : std::string("<unreadable>")});
  }
  VT_ASSIGN_OR_RETURN(std::vector<std::string> names, ck.file.list_datasets());
  for (const std::string& n : names) {
    VT_ASSIGN_OR_RETURN(h5::Dataset ds, ck.file.open_dataset(n));
    VT_ASSIGN_OR_RETURN(Shape shape, ds.shape());
    info.datasets.push_back({n, shape, ds.get_attr("checksum").value_or("")});
  }
  return info;
}

std::string format_checkpoint_info(const CheckpointInfo& info) {
  std::string out = absl::StrCat("checkpoint ", info.path, "\n");
  const nlohmann::json& l = info.meta.layout;
  absl::StrAppend(&out, "  format ", kCheckpointFormat, " v", info.format_version, ", written by ",
                  info.meta.library_version, " on layout ",
                  l.is_object() ? absl::StrCat("tp=", l.value("tp", nlohmann::json(1)).dump(),
                                               " dp=", l.value("dp", nlohmann::json(1)).dump(),
                                               " pp=", l.value("pp", nlohmann::json(1)).dump())
                                : std::string("?"),
                  "\n");
  absl::StrAppend(&out, "  step ", info.meta.step, ", ", info.meta.tokens, " tokens\n");
  for (const auto& [name, value] : info.attributes) {
    if (name == "format" || name == "format_version" || name == "library_version" ||
        name == "step" || name == "tokens" || name == "layout")
      continue;
    absl::StrAppend(&out, "  ", name, " ", value, "\n");
  }
  int64_t total = 0;
  for (const auto& d : info.datasets) total += shape_numel(d.shape);
  absl::StrAppend(&out, "  datasets: ", info.datasets.size(), " (", total, " floats)\n");
  for (const auto& d : info.datasets)
    absl::StrAppend(&out, "    ", d.path, "  ", shape_str(d.shape),
                    d.checksum.empty() ? "" : "  checksum " + d.checksum, "\n");
  return out;
}

}  // namespace vt
