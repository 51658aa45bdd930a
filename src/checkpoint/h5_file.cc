// HDF5 RAII helpers.
#include "checkpoint/h5_file.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vt::h5 {

namespace {
// Silences HDF5's own error stack printing; we report through absl::Status.
struct QuietErrors {
  QuietErrors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const QuietErrors kQuiet;

absl::Status ensure_parents(hid_t file, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  std::string cur;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    cur += "/" + parts[i];
    if (H5Lexists(file, cur.c_str(), H5P_DEFAULT) > 0) continue;
    hid_t g = H5Gcreate2(file, cur.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return absl::InternalError(absl::StrCat("cannot create HDF5 group ", cur));
    H5Gclose(g);
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<File> File::create(const std::string& path) {
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) return absl::PermissionDeniedError(absl::StrCat("cannot create HDF5 file ", path));
  return File(id);
}

absl::StatusOr<File> File::open_read(const std::string& path) {
  if (H5Fis_hdf5(path.c_str()) <= 0)
    return absl::InvalidArgumentError(absl::StrCat(path, " is not an HDF5 file (or is missing)"));
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("cannot open HDF5 file ", path));
  return File(id);
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0) H5Fclose(id_);
    id_ = o.id_;
    o.id_ = -1;
  }
  return *this;
}

File::~File() {
  if (id_ >= 0) H5Fclose(id_);
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
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  if (err < 0) return absl::InternalError(absl::StrCat("cannot write HDF5 dataset ", path));
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
  return H5Lexists(id_, path.c_str(), H5P_DEFAULT) > 0;
}

absl::StatusOr<std::vector<int64_t>> File::shape_of(const std::string& path) const {
  if (!exists(path)) return absl::NotFoundError(absl::StrCat("no dataset ", path));
  hid_t ds = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
  if (ds < 0) return absl::NotFoundError(absl::StrCat("cannot open dataset ", path));
  hid_t space = H5Dget_space(ds);
  int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(nd > 0 ? nd : 0);
  if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  H5Dclose(ds);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

template <class T>
static absl::StatusOr<std::vector<T>> read_all(hid_t file, const std::string& path, hid_t type) {
  hid_t ds = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (ds < 0) return absl::NotFoundError(absl::StrCat("no dataset ", path));
  hid_t space = H5Dget_space(ds);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  std::vector<T> out(n > 0 ? n : 0);
  herr_t err = H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Dclose(ds);
  if (err < 0) return absl::DataLossError(absl::StrCat("cannot read dataset ", path));
  return out;
}

absl::StatusOr<std::vector<float>> File::read_f32(const std::string& path) const {
  return read_all<float>(id_, path, H5T_NATIVE_FLOAT);
}
absl::StatusOr<std::vector<int32_t>> File::read_i32(const std::string& path) const {
  return read_all<int32_t>(id_, path, H5T_NATIVE_INT32);
}

absl::Status File::set_attr(const std::string& name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() > 0 ? value.size() : 1);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  hid_t space = H5Screate(H5S_SCALAR);
  if (H5Aexists(id_, name.c_str()) > 0) H5Adelete(id_, name.c_str());
  hid_t attr = H5Acreate2(id_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t err = attr < 0 ? -1 : H5Awrite(attr, type, value.empty() ? "" : value.data());
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  if (err < 0) return absl::InternalError(absl::StrCat("cannot write HDF5 attribute ", name));
  return absl::OkStatus();
}

absl::StatusOr<std::string> File::get_attr(const std::string& name) const {
  if (H5Aexists(id_, name.c_str()) <= 0)
    return absl::NotFoundError(absl::StrCat("no attribute ", name));
  hid_t attr = H5Aopen(id_, name.c_str(), H5P_DEFAULT);
  hid_t type = H5Aget_type(attr);
  size_t size = H5Tget_size(type);
  std::string out(size, '\0');
  hid_t mem = H5Tcopy(H5T_C_S1);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, H5T_STR_NULLPAD);
  herr_t err = H5Aread(attr, mem, out.data());
  H5Tclose(mem);
  H5Tclose(type);
  H5Aclose(attr);
  if (err < 0) return absl::DataLossError(absl::StrCat("cannot read attribute ", name));
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

}  // namespace vt::h5
