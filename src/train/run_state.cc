// Resume choice, checkpoint-directory lock, and a run's state in checkpoints (see run_state.h).
#include "train/run_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "core/file_safety.h"
#include "parallel/failure.h"

namespace vt {

namespace fs = std::filesystem;

absl::StatusOr<std::string> resume_path(const TrainOptions& o, const ProcessGrid& grid) {
  if (o.resume == "none") return std::string();
  if (o.resume != "auto") return o.resume;
  // Rank 0 decides, so every rank takes the same (collective) path even while rank 0 is
  // already creating the directory.
  float exists = grid.world()->rank() == 0 && fs::exists(o.ckpt_dir) ? 1.0f : 0.0f;
  grid.world()->broadcast(&exists, 1, 0);
  if (exists == 0.0f) return std::string();
  return find_latest_good(o.ckpt_dir, &grid);
}

absl::StatusOr<CheckpointDirLock> CheckpointDirLock::acquire(const std::string& dir,
                                                             const ProcessGrid& grid) {
  CheckpointDirLock lock;
  absl::Status st;
  if (grid.world()->rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string file = (fs::path(dir) / ".vtrain.lock").string();
    if (ec && !fs::is_directory(dir)) {
      st = absl::PermissionDeniedError(absl::StrCat(
          "--ckpt-dir ", dir, ": ", write_error(dir, ec.value()),
          "; choose a directory this job may write"));
    } else if (absl::StatusOr<int> fd = open_lock_file(file); !fd.ok()) {
      // The errno is taken where the open failed (a read-only mount says so, not whatever a
      // later call left in errno).
      st = absl::Status(fd.status().code(),
                        absl::StrCat("cannot create the lock file in --ckpt-dir ", dir, ": ",
                                     fd.status().message(), "; choose a directory this job may write"));
    } else if (::flock(*fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(*fd);
      st = absl::FailedPreconditionError(absl::StrCat(
          "another vtrain run is using --ckpt-dir ", dir,
          " (it holds .vtrain.lock); stop that run or choose another directory"));
    } else {
      lock.fd_ = *fd;
    }
  }
  VT_RETURN_IF_ERROR(all_ok(grid.world(), st));
  return lock;
}

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<NamedTensor> gather_optimizer_states(const ParamStore& store,
                                                 optim::DistributedOptimizer& opt) {
  std::vector<NamedTensor> out;
  gather_optimizer_states(store, opt, out);
  return out;
}

void gather_optimizer_states(const ParamStore& store, optim::DistributedOptimizer& opt,
                             std::vector<NamedTensor>& into) {
  size_t k = 0;
  for (const ParamInfo& info : store.infos())
    for (const std::string& kind : opt.state_kinds(info.name)) {
      const std::string path = "/optim/" + info.name + "/" + kind;
      const bool reusable = k < into.size() && into[k].path == path && into[k].tensor.on_host() &&
                            into[k].tensor.dtype() == DType::kF32 &&
                            into[k].tensor.shape() == info.shape;
      if (reusable)
        opt.gather_state_into(info.name, kind, into[k].tensor);
      else if (k < into.size())
        into[k] = {path, opt.gather_state(info.name, kind)};
      else
        into.push_back({path, opt.gather_state(info.name, kind)});
      ++k;
    }
  into.resize(k);
}

absl::StatusOr<CheckpointMeta> load_training_state(const std::string& path, const ModelConfig& cfg,
                                                   ParamStore& store,
                                                   optim::DistributedOptimizer& opt,
                                                   const ProcessGrid& grid) {
  std::vector<NamedTensor> states = gather_optimizer_states(store, opt);  // shapes to fill
  // Checkpoints are read into host memory; a device store gets the values copied over.
  ParamStore host = store.device() == Device::kCPU ? store : store.host_mirror();
  VT_ASSIGN_OR_RETURN(CheckpointMeta meta, load_checkpoint(path, cfg, host, states, &grid));
  if (store.device() != Device::kCPU) store.copy_params_from(host);
  store.refresh_compute_copy();
  for (const NamedTensor& t : states) {
    const size_t a = t.path.find('/', 1), b = t.path.rfind('/');
    opt.scatter_state(t.path.substr(a + 1, b - a - 1), t.path.substr(b + 1), t.tensor);
  }
  opt.set_step_count(meta.step);
  return meta;
}

}  // namespace vt
