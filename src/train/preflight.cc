// Checks before step 1 (see preflight.h).
#include "train/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/host_memory.h"
#include "core/rng.h"
#include "parallel/failure.h"

namespace vt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A number that identifies this host among the job's ranks.
float host_key() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return static_cast<float>(fnv1a64(host) % 1000003);
}

}  // namespace

absl::Status check_memory_fits(const MemoryEstimate& estimate, Device device, bool skip,
                               Communicator* world) {
  const double mine = estimate.total();
  double need = mine, have = -1;
  int sharing = 1;
  std::string pool;
  if (device != Device::kCPU && has_backend(device) && backend(device).available_bytes() >= 0) {
    have = static_cast<double>(backend(device).available_bytes());
    pool = absl::StrCat("device ", backend(device).name(), " has ", absl::StrFormat("%.2f", have / kGiB),
                        " GiB free");
  } else {
    // Host memory: the estimates of every rank on this host add up.
    const int n = world->size();
    std::vector<float> keys(n), needs(n);
    // (Value tables kept in host memory count here whatever the device.)
    const float key = host_key(), gib = static_cast<float>((mine + estimate.host_tables) / kGiB);
    world->all_gather(&key, keys.data(), 1);
    world->all_gather(&gib, needs.data(), 1);
    need = 0;
    sharing = 0;
    for (int r = 0; r < n; ++r)
      if (keys[r] == key) {
        need += static_cast<double>(needs[r]) * kGiB;
        ++sharing;
      }
    have = static_cast<double>(host_available_bytes());
    pool = absl::StrCat("the host has ", absl::StrFormat("%.2f", have / kGiB),
                        " GiB available (MemAvailable, within the cgroup limit)");
  }
  absl::Status st;
  if (have >= 0 && need > have) {
    st = absl::ResourceExhaustedError(absl::StrCat(
        "this run does not fit in memory: rank ", world->rank(), " needs an estimated ",
        absl::StrFormat("%.2f", mine / kGiB), " GiB (", estimate.to_string(), ")",
        sharing > 1 ? absl::StrFormat(", %.2f GiB for the %d ranks on its host", need / kGiB, sharing) : "",
        ", but ", pool, "; lower --micro-batch or --seq-len, spread the model over more ranks "
        "(--tp, --pp), use --recompute, or pass --skip-memory-check to start anyway"));
  }
  if (skip && !st.ok()) {
    if (world->rank() == 0 || world->size() == 1)
      std::fprintf(stderr, "vtrain: warning (--skip-memory-check): %s\n", std::string(st.message()).c_str());
    st = absl::OkStatus();
  }
  return all_ok(world, st);
}

absl::StatusOr<int> eval_micro_batches(const std::string& data_dir, int64_t val_tokens, int64_t T,
                                       int micro_batch, int dp, int64_t max_tokens) {
  const int64_t rows_per_micro = static_cast<int64_t>(micro_batch) * dp;
  const int64_t rows = std::min<int64_t>(max_tokens / T, (val_tokens - 1) / T);
  const int64_t micro = rows / rows_per_micro;
  if (micro < 1)
    return absl::FailedPreconditionError(absl::StrCat(
        "an evaluation needs at least one batch of ", rows_per_micro, " rows x ", T + 1,
        " tokens (micro-batch ", micro_batch, " x data-parallel ", dp, ", sequence ", T,
        " + 1), but ",
        max_tokens / T < rows_per_micro
            ? absl::StrCat("the evaluation size of ", max_tokens, " tokens holds only ", max_tokens / T,
                           " rows; raise it")
            : absl::StrCat("the validation split of ", data_dir, " holds ", val_tokens,
                           " tokens; prepare with a larger --val-fraction"),
        ", or lower --micro-batch or --seq-len"));
  return static_cast<int>(std::min<int64_t>(micro, 1 << 30));
}

absl::Status check_eval_split(const std::string& data_dir, int64_t vocab_size, int64_t T,
                              int micro_batch, int dp, int64_t max_tokens, Communicator* world) {
  absl::Status st;
  if (world->rank() == 0) {
    st = [&]() -> absl::Status {
      data::LoaderOptions lo;
      lo.vocab_size = vocab_size;
      VT_ASSIGN_OR_RETURN(data::DataLoader val, data::DataLoader::open(data_dir, "val", lo));
      VT_ASSIGN_OR_RETURN(const int micro, eval_micro_batches(data_dir, val.tokens_per_epoch(), T,
                                                              micro_batch, dp, max_tokens));
      // Read what the evaluation will read: the loader checks every id with file and offset.
      const int64_t rows = static_cast<int64_t>(micro_batch) * dp;
      std::vector<int32_t> in(rows * T), tg(rows * T);
      for (int m = 0; m < micro; ++m) VT_RETURN_IF_ERROR(val.next_batch_into(rows, T, 0, 1, in.data(), tg.data()));
      return absl::OkStatus();
    }();
  }
  return all_ok(world, st);
}

absl::Status check_train_ids(const data::DataLoader& train, Communicator* world) {
  absl::Status st;
  const std::vector<std::string>& paths = train.shard_paths();
  for (size_t i = world->rank(); i < paths.size() && st.ok(); i += world->size()) {
    auto r = data::ShardReader::open(paths[i]);
    st = r.ok() ? r->check_ids(train.vocab_size()) : r.status();
  }
  return all_ok(world, st);
}

}  // namespace vt
