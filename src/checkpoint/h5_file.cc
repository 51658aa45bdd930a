// HDF5 RAII helpers (see h5_file.h).
#include "checkpoint/h5_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/file_safety.h"

namespace vt::h5 {

namespace {

// HDF5 closes whatever is still open from an atexit handler. After a failed close (a full disk:
// the flush fails, then H5Fclose fails half-way) that handler dereferences a half-freed file and
// the process dies with SIGSEGV after printing the real error. vtrain closes its files itself,
// so the handler is turned off before the library initializes (static initialization).
[[maybe_unused]] const bool kNoAtexit = [] {
  H5dont_atexit();
  return true;
}();
// Silences HDF5's own error stack printing; we report through absl::Status.
struct QuietErrors {
  QuietErrors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const QuietErrors kQuiet;

// One line per HDF5 error record. The file drivers write long records ("file write failed:
// time = ..., filename = ..., errno = 28, error message = 'No space left on device', buf = ...");
// those are cut to "file write failed: No space left on device (errno 28)".
std::string condense(std::string d) {
  const size_t m = d.find("error message = '");
  if (m != std::string::npos) {
    const size_t a = m + 17, b = d.find('\'', a);
    std::string head = d.substr(0, d.find(':'));
    std::string why = d.substr(a, b == std::string::npos ? std::string::npos : b - a);
    const size_t e = d.find("errno = ");
    std::string err;
    if (e != std::string::npos) err = " (errno " + d.substr(e + 8, d.find(',', e) - e - 8) + ")";
    d = head + ": " + why + err;
  }
  std::replace(d.begin(), d.end(), '\n', ' ');
  return d;
}

herr_t collect_error(unsigned, const H5E_error2_t* e, void* out) {
  if (e->desc && e->desc[0]) static_cast<std::vector<std::string>*>(out)->push_back(condense(e->desc));
  return 0;
}

// "<what> (HDF5: <innermost messages>)". HDF5 clears its error stack at the start of every API
// call, so `stack` must be taken right after the failing call (the default: take it now).
std::string with_stack(const std::string& what, std::string stack = error_stack()) {
  return stack.empty() ? what : absl::StrCat(what, " (HDF5: ", stack, ")");
}

absl::Status ensure_parents(hid_t file, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  std::string cur;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    cur += "/" + parts[i];
    if (H5Lexists(file, cur.c_str(), H5P_DEFAULT) > 0) continue;
    hid_t g = H5Gcreate2(file, cur.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return absl::InternalError(with_stack(absl::StrCat("cannot create HDF5 group ", cur)));
    H5Gclose(g);
  }
  return absl::OkStatus();
}

// A dataset transfer property list: MPI-IO collective/independent on parallel files.
hid_t make_dxpl(bool parallel, Transfer t) {
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (parallel)
    H5Pset_dxpl_mpio(dxpl, t == Transfer::kCollective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
  return dxpl;
}

// File and memory dataspaces selecting `slab` (or nothing).
struct Spaces {
  hid_t file = -1, mem = -1;
  ~Spaces() {
    if (file >= 0) H5Sclose(file);
    if (mem >= 0) H5Sclose(mem);
  }
};

absl::Status select(hid_t ds, const Slab* slab, Spaces& sp) {
  sp.file = H5Dget_space(ds);
  if (sp.file < 0) return absl::DataLossError(with_stack("cannot get a dataset's dataspace"));
  const int nd = H5Sget_simple_extent_ndims(sp.file);
  if (slab == nullptr) {
    const hsize_t one = 1;
    sp.mem = H5Screate_simple(1, &one, nullptr);
    H5Sselect_none(sp.file);
    H5Sselect_none(sp.mem);
    return absl::OkStatus();
  }
  if (static_cast<int>(slab->start.size()) != nd || slab->count.size() != slab->start.size())
    return absl::InvalidArgumentError(absl::StrCat("a slab of rank ", slab->start.size(),
                                                   " for a dataset of rank ", nd));
  if (nd == 0) {  // scalar dataspace: the whole thing
    sp.mem = H5Screate(H5S_SCALAR);
    return absl::OkStatus();
  }
  std::vector<hsize_t> start(slab->start.begin(), slab->start.end());
  std::vector<hsize_t> count(slab->count.begin(), slab->count.end());
  if (H5Sselect_hyperslab(sp.file, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
    return absl::InvalidArgumentError(with_stack("bad hyperslab"));
  const hsize_t n = static_cast<hsize_t>(slab->numel());
  sp.mem = H5Screate_simple(1, &n, nullptr);
  if (n == 0) {
    H5Sselect_none(sp.file);
    H5Sselect_none(sp.mem);
  }
  return absl::OkStatus();
}

absl::Status set_string_attr(hid_t loc, const std::string& name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() > 0 ? value.size() : 1);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  hid_t space = H5Screate(H5S_SCALAR);
  if (H5Aexists(loc, name.c_str()) > 0) H5Adelete(loc, name.c_str());
  hid_t attr = H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t err = attr < 0 ? -1 : H5Awrite(attr, type, value.empty() ? "" : value.data());
  const std::string why = err < 0 ? error_stack() : "";
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  if (err < 0) return absl::InternalError(with_stack(absl::StrCat("cannot write HDF5 attribute ", name), why));
  return absl::OkStatus();
}

absl::StatusOr<std::string> get_string_attr(hid_t loc, const std::string& name) {
  if (H5Aexists(loc, name.c_str()) <= 0)
    return absl::NotFoundError(absl::StrCat("no attribute ", name));
  hid_t attr = H5Aopen(loc, name.c_str(), H5P_DEFAULT);
  if (attr < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot open attribute ", name)));
  hid_t type = H5Aget_type(attr);
  if (H5Tget_class(type) != H5T_STRING) {
    H5Tclose(type);
    H5Aclose(attr);
    return absl::InvalidArgumentError(absl::StrCat("attribute ", name, " is not a string"));
  }
  if (H5Tis_variable_str(type) > 0) {  // e.g. written by h5py
    char* text = nullptr;
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));  // HDF5 does not convert between ASCII and UTF-8
    herr_t err = H5Aread(attr, mem, &text);
    std::string out = err >= 0 && text != nullptr ? std::string(text) : std::string();
    if (text != nullptr) H5free_memory(text);
    H5Tclose(mem);
    H5Tclose(type);
    H5Aclose(attr);
    if (err < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot read attribute ", name)));
    return out;
  }
  size_t size = H5Tget_size(type);
  std::string out(size, '\0');
  hid_t mem = H5Tcopy(H5T_C_S1);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, H5T_STR_NULLPAD);
  H5Tset_cset(mem, H5Tget_cset(type));
  herr_t err = H5Aread(attr, mem, out.data());
  H5Tclose(mem);
  H5Tclose(type);
  H5Aclose(attr);
  if (err < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot read attribute ", name)));
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}
}  // namespace

std::string error_stack() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &msgs);
  H5Eclear2(H5E_DEFAULT);
  // The innermost two messages say what actually went wrong.
  if (msgs.size() > 2) msgs.erase(msgs.begin(), msgs.end() - 2);
  return absl::StrJoin(msgs, "; ");
}

int64_t Slab::numel() const {
  int64_t n = 1;
  for (int64_t c : count) n *= c;
  return n;
}

// ---- Dataset ----

Dataset& Dataset::operator=(Dataset&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0) H5Dclose(id_);
    id_ = o.id_;
    path_ = std::move(o.path_);
    parallel_ = o.parallel_;
    o.id_ = -1;
  }
  return *this;
}

Dataset::~Dataset() {
  if (id_ >= 0) H5Dclose(id_);
}

absl::StatusOr<std::vector<int64_t>> Dataset::shape() const {
  hid_t space = H5Dget_space(id_);
  if (space < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot read the shape of ", path_)));
  int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(nd > 0 ? nd : 0);
  if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

bool Dataset::is_f32() const {
  hid_t type = H5Dget_type(id_);
  const bool ok = type >= 0 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
  if (type >= 0) H5Tclose(type);
  return ok;
}

absl::Status Dataset::write_slab(const Slab* slab, const float* data, Transfer t) {
  Spaces sp;
  if (absl::Status st = select(id_, slab, sp); !st.ok()) return st;
  static const float dummy = 0;
  hid_t dxpl = make_dxpl(parallel_, t);
  herr_t err = H5Dwrite(id_, H5T_NATIVE_FLOAT, sp.mem, sp.file, dxpl, data ? data : &dummy);
  const std::string why = err < 0 ? error_stack() : "";
  H5Pclose(dxpl);
  if (err < 0) return absl::InternalError(with_stack(absl::StrCat("cannot write dataset ", path_), why));
  return absl::OkStatus();
}

absl::Status Dataset::read_slab(const Slab* slab, float* data, Transfer t) const {
  Spaces sp;
  if (absl::Status st = select(id_, slab, sp); !st.ok()) return st;
  float dummy = 0;
  hid_t dxpl = make_dxpl(parallel_, t);
  herr_t err = H5Dread(id_, H5T_NATIVE_FLOAT, sp.mem, sp.file, dxpl, data ? data : &dummy);
  const std::string why = err < 0 ? error_stack() : "";
  H5Pclose(dxpl);
  if (err < 0)
    return absl::DataLossError(
        with_stack(absl::StrCat("cannot read dataset ", path_, " (truncated file?)"), why));
  return absl::OkStatus();
}

int64_t Dataset::contiguous_offset() const {
  hid_t dcpl = H5Dget_create_plist(id_);
  const bool contiguous = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
                          H5Pget_external_count(dcpl) == 0;
  if (dcpl >= 0) H5Pclose(dcpl);
  hid_t type = H5Dget_type(id_);
  const bool f32le = type >= 0 && H5Tequal(type, H5T_IEEE_F32LE) > 0;
  if (type >= 0) H5Tclose(type);
  hid_t space = H5Dget_space(id_);
  const hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  if (space >= 0) H5Sclose(space);
  const haddr_t at = contiguous && f32le ? H5Dget_offset(id_) : HADDR_UNDEF;
  const bool whole = at != HADDR_UNDEF && n >= 0 &&
                     H5Dget_storage_size(id_) == static_cast<hsize_t>(4 * n);
  H5Eclear2(H5E_DEFAULT);
  return whole ? static_cast<int64_t>(at) : -1;
}

int64_t Dataset::storage_bytes() const {
  const hsize_t n = H5Dget_storage_size(id_);
  H5Eclear2(H5E_DEFAULT);
  return static_cast<int64_t>(n);
}

absl::Status Dataset::set_attr(const std::string& name, const std::string& value) {
  return set_string_attr(id_, name, value);
}
absl::StatusOr<std::string> Dataset::get_attr(const std::string& name) const {
  return get_string_attr(id_, name);
}

// ---- File ----

absl::StatusOr<File> File::create(const std::string& path, MPI_Comm comm, bool dense_attributes) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (comm != MPI_COMM_NULL) H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  if (dense_attributes) {
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5Pset_attr_phase_change(fcpl, 0, 0);
  }
  // HDF5 opens the name it is given and follows a symbolic link planted there: one process
  // creates the file itself first (a new file, never through a link: file_safety.h), HDF5 then
  // truncates that file, and the name must still be it once HDF5 holds it open.
  struct stat made {};
  if (comm == MPI_COMM_NULL) {
    absl::StatusOr<int> fd = create_new_file(path);
    if (!fd.ok()) {
      H5Pclose(fapl);
      H5Pclose(fcpl);
      return fd.status();
    }
    ::fstat(*fd, &made);
    ::close(*fd);
  }
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  const std::string why = id < 0 ? error_stack() : "";
  H5Pclose(fapl);
  H5Pclose(fcpl);
  if (id < 0)
    return absl::PermissionDeniedError(with_stack(absl::StrCat("cannot create HDF5 file ", path), why));
  if (comm == MPI_COMM_NULL) {
    struct stat now {};
    if (::lstat(path.c_str(), &now) != 0 || !S_ISREG(now.st_mode) || now.st_ino != made.st_ino ||
        now.st_dev != made.st_dev) {
      H5Fclose(id);
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create HDF5 file ", path, ": the name was replaced while it was created (another "
          "process writes this directory)"));
    }
  }
  return File(id, comm);
}

absl::StatusOr<File> File::open_read(const std::string& path, MPI_Comm comm) {
  const htri_t is = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  if (is <= 0)
    return absl::InvalidArgumentError(absl::StrCat(path, " is not an HDF5 file (or is missing)"));
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (comm != MPI_COMM_NULL) H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  const std::string why = id < 0 ? error_stack() : "";
  H5Pclose(fapl);
  if (id < 0)
    return absl::DataLossError(
        with_stack(absl::StrCat("cannot open HDF5 file ", path, " (truncated or corrupt?)"), why));
  return File(id, comm);
}

absl::StatusOr<File> File::open_write(const std::string& path) {
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0)
    return absl::InternalError(with_stack(absl::StrCat("cannot open HDF5 file ", path, " for writing")));
  return File(id, MPI_COMM_NULL);
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0) H5Fclose(id_);
    id_ = o.id_;
    comm_ = o.comm_;
    o.id_ = -1;
  }
  return *this;
}

File::~File() {
  if (id_ >= 0) H5Fclose(id_);
}

absl::Status File::close() {
  if (id_ < 0) return absl::OkStatus();
  herr_t e1 = H5Fflush(id_, H5F_SCOPE_GLOBAL);
  std::string why = e1 < 0 ? error_stack() : "";  // the first failure says what went wrong
  herr_t e2 = H5Fclose(id_);
  if (e2 < 0 && why.empty()) why = error_stack();
  H5Eclear2(H5E_DEFAULT);
  id_ = -1;
  if (e1 < 0 || e2 < 0) return absl::InternalError(with_stack("cannot flush and close an HDF5 file", why));
  return absl::OkStatus();
}

absl::Status File::write(const std::string& path, const std::vector<int64_t>& shape, hid_t type,
                         const void* data) {
  auto st = ensure_parents(id_, path);
  if (!st.ok()) return st;
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t space = shape.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t ds = H5Dcreate2(id_, path.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t err = ds < 0 ? -1 : H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  const std::string why = err < 0 ? error_stack() : "";
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  if (err < 0) return absl::InternalError(with_stack(absl::StrCat("cannot write HDF5 dataset ", path), why));
  return absl::OkStatus();
}

absl::Status File::write_f32(const std::string& path, const std::vector<int64_t>& shape,
                             const float* data) {
  return write(path, shape, H5T_NATIVE_FLOAT, data);
}
absl::Status File::write_f64(const std::string& path, const std::vector<int64_t>& shape,
                             const double* data) {
  return write(path, shape, H5T_NATIVE_DOUBLE, data);
}
absl::Status File::write_i32(const std::string& path, const std::vector<int64_t>& shape,
                             const int32_t* data) {
  return write(path, shape, H5T_NATIVE_INT32, data);
}

bool File::exists(const std::string& path) const {
  // H5Lexists fails (rather than answering false) when an intermediate group is missing.
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  std::string cur;
  for (const std::string& p : parts) {
    cur += "/" + p;
    if (H5Lexists(id_, cur.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return !parts.empty();
}

absl::StatusOr<std::vector<int64_t>> File::shape_of(const std::string& path) const {
  auto ds = open_dataset(path);
  if (!ds.ok()) return ds.status();
  return ds->shape();
}

absl::StatusOr<Dataset> File::create_f32(const std::string& path, const std::vector<int64_t>& shape) {
  if (absl::Status st = ensure_parents(id_, path); !st.ok()) return st;
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t space = shape.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_layout(dcpl, H5D_CONTIGUOUS);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  hid_t ds = H5Dcreate2(id_, path.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  const std::string why = ds < 0 ? error_stack() : "";
  H5Pclose(dcpl);
  H5Sclose(space);
  if (ds < 0) return absl::InternalError(with_stack(absl::StrCat("cannot create HDF5 dataset ", path), why));
  return Dataset(ds, path, parallel());
}

absl::StatusOr<Dataset> File::open_dataset(const std::string& path) const {
  if (!exists(path)) return absl::NotFoundError(absl::StrCat("no dataset ", path));
  hid_t ds = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
  if (ds < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot open dataset ", path)));
  return Dataset(ds, path, parallel());
}

namespace {
herr_t visit_dataset(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}
}  // namespace

absl::StatusOr<std::vector<std::string>> File::list_datasets() const {
  std::vector<std::string> out;
  if (H5Ovisit(id_, H5_INDEX_NAME, H5_ITER_INC, visit_dataset, &out) < 0)
    return absl::DataLossError(with_stack("cannot list the datasets (corrupt file?)"));
  std::sort(out.begin(), out.end());
  return out;
}

template <class T>
static absl::StatusOr<std::vector<T>> read_all(const File& f, const std::string& path, hid_t type) {
  auto ds = f.open_dataset(path);
  if (!ds.ok()) return ds.status();
  hid_t space = H5Dget_space(ds->id());
  hssize_t n = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  std::vector<T> out(n > 0 ? n : 0);
  herr_t err = H5Dread(ds->id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  if (err < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot read dataset ", path)));
  return out;
}

absl::StatusOr<std::vector<float>> File::read_f32(const std::string& path) const {
  return read_all<float>(*this, path, H5T_NATIVE_FLOAT);
}
absl::StatusOr<std::vector<int32_t>> File::read_i32(const std::string& path) const {
  return read_all<int32_t>(*this, path, H5T_NATIVE_INT32);
}

absl::Status File::set_attr(const std::string& name, const std::string& value) {
  return set_string_attr(id_, name, value);
}
absl::StatusOr<std::string> File::get_attr(const std::string& name) const {
  return get_string_attr(id_, name);
}

absl::Status File::set_attr_i64(const std::string& name, int64_t value) {
  hid_t space = H5Screate(H5S_SCALAR);
  if (H5Aexists(id_, name.c_str()) > 0) H5Adelete(id_, name.c_str());
  hid_t attr = H5Acreate2(id_, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t err = attr < 0 ? -1 : H5Awrite(attr, H5T_NATIVE_INT64, &value);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  if (err < 0) return absl::InternalError(with_stack(absl::StrCat("cannot write HDF5 attribute ", name)));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> File::get_attr_i64(const std::string& name) const {
  if (H5Aexists(id_, name.c_str()) <= 0)
    return absl::NotFoundError(absl::StrCat("no attribute ", name));
  hid_t attr = H5Aopen(id_, name.c_str(), H5P_DEFAULT);
  if (attr < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot open attribute ", name)));
  hid_t type = H5Aget_type(attr);
  const bool is_int = H5Tget_class(type) == H5T_INTEGER;
  H5Tclose(type);
  int64_t v = 0;
  herr_t err = is_int ? H5Aread(attr, H5T_NATIVE_INT64, &v) : -1;
  H5Aclose(attr);
  if (err < 0) return absl::DataLossError(with_stack(absl::StrCat("cannot read integer attribute ", name)));
  return v;
}

bool File::has_attr(const std::string& name) const { return H5Aexists(id_, name.c_str()) > 0; }

namespace {
herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> File::attr_names() const {
  std::vector<std::string> out;
  hsize_t idx = 0;
  H5Aiterate2(id_, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &out);
  H5Eclear2(H5E_DEFAULT);
  return out;
}

}  // namespace vt::h5
