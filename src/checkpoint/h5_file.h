// A small RAII layer over the HDF5 C API for the files vtrain writes and reads (case files for
// the reference tests, checkpoints): create/open (serial, or collectively with the MPI-IO driver
// on a communicator), whole-dataset writes and reads of f32/f64/i32, f32 datasets written and
// read by hyperslab (collective or independent), string / int64 attributes on the file or on a
// dataset, and a sorted listing of every dataset. Errors are absl::Status and carry HDF5's own
// innermost error description.
#pragma once
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::h5 {

// The innermost messages of HDF5's error stack for this thread (then clears it); "" if none.
std::string error_stack();

// A slab of a dataset: `start` and `count` per dimension (same rank as the dataset).
struct Slab {
  std::vector<int64_t> start, count;
  int64_t numel() const;
};

// How a hyperslab transfer is done in a file opened on a communicator.
enum class Transfer { kCollective, kIndependent };

class Dataset {
 public:
  Dataset(Dataset&& o) noexcept : id_(o.id_), path_(std::move(o.path_)), parallel_(o.parallel_) {
    o.id_ = -1;
  }
  Dataset& operator=(Dataset&& o) noexcept;
  ~Dataset();
  hid_t id() const { return id_; }
  const std::string& path() const { return path_; }

  absl::StatusOr<std::vector<int64_t>> shape() const;
  bool is_f32() const;  // stored as a 32-bit IEEE float
  // Writes / reads `slab` of the dataset from / into the contiguous buffer `data` (slab.numel()
  // floats, row-major). `slab == nullptr` selects nothing: the rank takes part in a collective
  // transfer without moving data.
  absl::Status write_slab(const Slab* slab, const float* data, Transfer t);
  absl::Status read_slab(const Slab* slab, float* data, Transfer t) const;

  absl::Status set_attr(const std::string& name, const std::string& value);
  absl::StatusOr<std::string> get_attr(const std::string& name) const;

  // The byte offset in the file of the dataset's data when it is stored as one contiguous,
  // allocated block of little-endian float32 (what create_f32 makes): raw reads and writes of
  // that block are reads and writes of the dataset (checkpoint/raw_io.h). -1 otherwise (chunked,
  // compact, not allocated, another type: use read_slab).
  int64_t contiguous_offset() const;
  // Bytes the file allocates for the dataset's data (compressed size for a filtered dataset).
  int64_t storage_bytes() const;

 private:
  friend class File;
  Dataset(hid_t id, std::string path, bool parallel)
      : id_(id), path_(std::move(path)), parallel_(parallel) {}
  hid_t id_ = -1;
  std::string path_;
  bool parallel_ = false;
};

class File {
 public:
  // Replaces: serially, whatever had the name (a stale file, a symbolic link: removed, never
  // followed) is unlinked and a new file made (file_safety.h create_new_file). With `comm` !=
  // MPI_COMM_NULL (truncates; follows links: not used for checkpoints) the file is created collectively with the MPI-IO
  // driver (every rank of `comm` must call). `dense_attributes` lifts the 64 KiB limit on
  // attributes (HDF5 1.8 file format).
  static absl::StatusOr<File> create(const std::string& path, MPI_Comm comm = MPI_COMM_NULL,
                                     bool dense_attributes = false);
  static absl::StatusOr<File> open_read(const std::string& path, MPI_Comm comm = MPI_COMM_NULL);
  // Opens an existing file for writing by this process alone (POSIX driver).
  static absl::StatusOr<File> open_write(const std::string& path);
  File(File&& o) noexcept : id_(o.id_), comm_(o.comm_) { o.id_ = -1; }
  File& operator=(File&& o) noexcept;
  ~File();
  hid_t id() const { return id_; }
  bool parallel() const { return comm_ != MPI_COMM_NULL; }
  // Flushes and closes (reporting failure, unlike the destructor).
  absl::Status close();
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

  // An f32 dataset of `shape` whose contents are written later by slabs (collective on a
  // parallel file) or by raw writes at Dataset::contiguous_offset(): contiguous storage,
  // allocated at creation, no fill value written (every element must be written by someone).
  absl::StatusOr<Dataset> create_f32(const std::string& path, const std::vector<int64_t>& shape);
  absl::StatusOr<Dataset> open_dataset(const std::string& path) const;
  // Paths ("/model/wte", ...) of every dataset in the file, sorted by name.
  absl::StatusOr<std::vector<std::string>> list_datasets() const;

  absl::Status set_attr(const std::string& name, const std::string& value);  // on "/"
  absl::StatusOr<std::string> get_attr(const std::string& name) const;
  absl::Status set_attr_i64(const std::string& name, int64_t value);
  absl::StatusOr<int64_t> get_attr_i64(const std::string& name) const;
  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;

 private:
  File(hid_t id, MPI_Comm comm) : id_(id), comm_(comm) {}
  absl::Status write(const std::string& path, const std::vector<int64_t>& shape, hid_t type,
                     const void* data);
  hid_t id_ = -1;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace vt::h5
