// A small RAII layer over the HDF5 C API for the files vtrain writes and reads (case files for
// the reference tests, checkpoints): create/open, write and read whole datasets of f32/f64/i32
// with their shapes, string attributes, and listing of a group. Errors are absl::Status.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::h5 {

class File {
 public:
  static absl::StatusOr<File> create(const std::string& path);  // truncates
  static absl::StatusOr<File> open_read(const std::string& path);
  File(File&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  File& operator=(File&& o) noexcept;
  ~File();
  hid_t id() const { return id_; }

  // Datasets (intermediate groups are created). `shape` empty means a scalar dataset.
  absl::Status write_f32(const std::string& path, const std::vector<int64_t>& shape,
                         const float* data);
  absl::Status write_f64(const std::string& path, const std::vector<int64_t>& shape,
                         const double* data);
  absl::Status write_i32(const std::string& path, const std::vector<int64_t>& shape,
                         const int32_t* data);
  absl::StatusOr<std::vector<int64_t>> shape_of(const std::string& path) const;
  absl::StatusOr<std::vector<float>> read_f32(const std::string& path) const;
  absl::StatusOr<std::vector<int32_t>> read_i32(const std::string& path) const;
  bool exists(const std::string& path) const;

  absl::Status set_attr(const std::string& name, const std::string& value);  // on "/"
  absl::StatusOr<std::string> get_attr(const std::string& name) const;

 private:
  explicit File(hid_t id) : id_(id) {}
  absl::Status write(const std::string& path, const std::vector<int64_t>& shape, hid_t type,
                     const void* data);
  hid_t id_ = -1;
};

}  // namespace vt::h5
