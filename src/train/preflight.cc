// Checks before step 1 (see preflight.h).
#include "train/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/host_memory.h"
#include "core/rng.h"
#include "parallel/failure.h"
#include "plan/plan.h"

namespace vt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A number that identifies this host among the job's ranks.
float host_key() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return static_cast<float>(fnv1a64(host) % 1000003);
}

// The flags that give layout `l` to `vtrain train` on the same ranks (the global batch kept).
std::string layout_flags(const plan::Layout& l, const TrainOptions& o) {
  std::string s = absl::StrCat("--tp ", l.tp, " --pp ", l.pp, " --micro-batch ", l.micro_batch);
  if (l.recompute != Recompute::kOff) absl::StrAppend(&s, " --recompute ", recompute_name(l.recompute));
  if (l.vpp > 1) absl::StrAppend(&s, " --vpp ", l.vpp);
  else if (o.vpp > 1) absl::StrAppend(&s, " --vpp 1");
  if (static_cast<int64_t>(l.micro_batch) * l.dp * o.model.seq_len != o.global_batch)
    absl::StrAppend(&s, " --global-batch ", o.global_batch);
  return s;
}

// What the refusal adds to its first line: the breakdown of the rank that needs the most
// (`parts` of every rank, kParts floats each, GiB) and the layouts that fit `cap` bytes per rank.
constexpr int kParts = 11;

std::string refusal_detail(const std::vector<float>& parts, const std::vector<float>& stages,
                           double cap, const TrainOptions& o, const GridShape& shape,
                           DType act_dtype, int world_size) {
  int worst = 0;
  auto total = [&](int r) {
    MemoryEstimate m;
    double* f[kParts] = {&m.params, &m.grads, &m.compute_copy, &m.optimizer, &m.activations,
                         &m.recompute_transient, &m.backward_transient, &m.logits,
                         &m.table_rows, &m.host_tables, &m.grad_wire};
    for (int i = 0; i < kParts; ++i) *f[i] = static_cast<double>(parts[r * kParts + i]) * kGiB;
    return m;
  };
  for (int r = 1; r < world_size; ++r)
    if (total(r).total() > total(worst).total()) worst = r;
  plan::Layout cur{o.tp, o.pp, shape.dp, o.micro_batch, o.recompute, o.vpp};
  plan::LayoutPlan lp;
  lp.layout = cur;
  lp.mem = total(worst);
  lp.stage = static_cast<int>(stages[worst]);
  std::string s = absl::StrCat("\nrank ", worst, " needs the most; ", plan::format_breakdown(lp),
                               "  (this check counts no allowance: the free memory is measured "
                               "after start-up)\n");

  plan::PlanInput in;
  in.cfg = o.model;
  in.global_batch = o.global_batch;
  in.tokens = static_cast<double>(o.global_batch) * std::max<int64_t>(o.steps, 1);
  in.gpus = world_size;
  in.gpus_per_node = world_size;  // vtrain train does not keep tensor parallelism in a node
  in.gpu = plan::GpuSpec{"rank", cap / kGiB, 1};
  in.headroom = 0;
  in.workspace_gib = 0;
  in.act_dtype = act_dtype;
  in.vpp = o.vpp;
  in.table_offload = o.table_offload;
  in.recompute = "all";  // the selective modes too
  const std::vector<plan::LayoutPlan> fit = plan::suggest_layouts(in, cur, 3);
  if (fit.empty()) {
    auto least = plan::smallest_layout(in);
    absl::StrAppendFormat(&s, "no layout of these %d ranks fits in %.2f GiB per rank", world_size,
                          cap / kGiB);
    if (least.ok())
      absl::StrAppendFormat(&s, " (the smallest need: %.2f GiB with %s)", least->per_gpu() / kGiB,
                            layout_flags(least->layout, o));
    s += "; use more ranks, a shorter --seq-len or a smaller model\n";
    return s;
  }
  absl::StrAppendFormat(&s,
                        "layouts of the same %d ranks that fit in %.2f GiB per rank (the "
                        "enumeration of `vtrain plan`):\n",
                        world_size, cap / kGiB);
  for (const plan::LayoutPlan& l : fit)
    absl::StrAppendFormat(&s, "  %s: %.2f GiB per rank (tp %d pp %d dp %d, pipeline stage %d the "
                              "largest)\n",
                          layout_flags(l.layout, o), l.per_gpu() / kGiB, l.layout.tp,
                          l.layout.pp, l.layout.dp, l.stage);
  return s;
}

}  // namespace

absl::Status check_memory_fits(const MemoryEstimate& estimate, const TrainOptions& o,
                               const GridShape& shape, int stage, Device device, DType act_dtype,
                               Communicator* world) {
  const double mine = estimate.total();
  const double limit = o.memory_limit_gib > 0 ? o.memory_limit_gib * kGiB : -1;
  const int n = world->size();
  double need = mine, have = -1;
  int sharing = 1;
  std::string pool;
  const bool per_device =
      device != Device::kCPU && has_backend(device) && backend(device).available_bytes() >= 0;
  if (per_device) {
    have = limit > 0 ? limit : static_cast<double>(backend(device).available_bytes());
    pool = absl::StrCat("device ", backend(device).name(), " has ", absl::StrFormat("%.2f", have / kGiB),
                        limit > 0 ? " GiB (--memory-limit-gib)" : " GiB free");
  } else {
    have = limit > 0 ? limit : static_cast<double>(host_available_bytes());
    pool = absl::StrCat("the host has ", absl::StrFormat("%.2f", have / kGiB),
                        limit > 0 ? " GiB (--memory-limit-gib)"
                                  : " GiB available (MemAvailable, within the cgroup limit)");
  }
  // Every rank's parts, pipeline stage, host and pool: the host's ranks add up, and a refusal
  // shows the rank that needs the most and what fits the smallest pool per rank.
  const float key = host_key();
  std::vector<float> mine_parts = {
      static_cast<float>(estimate.params / kGiB), static_cast<float>(estimate.grads / kGiB),
      static_cast<float>(estimate.compute_copy / kGiB), static_cast<float>(estimate.optimizer / kGiB),
      static_cast<float>(estimate.activations / kGiB),
      static_cast<float>(estimate.recompute_transient / kGiB),
      static_cast<float>(estimate.backward_transient / kGiB), static_cast<float>(estimate.logits / kGiB),
      static_cast<float>(estimate.table_rows / kGiB), static_cast<float>(estimate.host_tables / kGiB),
      static_cast<float>(estimate.grad_wire / kGiB)};
  std::vector<float> parts(static_cast<size_t>(n) * kParts), stages(n), keys(n), needs(n), pools(n);
  // Value tables kept in host memory (--table-offload) count against the host's memory.
  const float fstage = static_cast<float>(stage),
              gib = static_cast<float>((mine + estimate.host_tables) / kGiB),
              fhave = static_cast<float>(have / kGiB);
  world->all_gather(mine_parts.data(), parts.data(), kParts);
  world->all_gather(&fstage, stages.data(), 1);
  world->all_gather(&key, keys.data(), 1);
  world->all_gather(&gib, needs.data(), 1);
  world->all_gather(&fhave, pools.data(), 1);
  if (!per_device) {
    need = 0;
    sharing = 0;
    for (int r = 0; r < n; ++r)
      if (keys[r] == key) {
        need += static_cast<double>(needs[r]) * kGiB;
        ++sharing;
      }
  }
  absl::Status st;
  if (have >= 0 && need > have) {
    // The smallest pool per rank of the job: the device's, or the host's over its ranks.
    double cap = std::numeric_limits<double>::infinity();
    for (int r = 0; r < n; ++r) {
      int on_host = 0;
      for (int q = 0; q < n; ++q) on_host += keys[q] == keys[r] ? 1 : 0;
      const double pool_r = static_cast<double>(pools[r]) * kGiB;
      if (pool_r >= 0) cap = std::min(cap, per_device ? pool_r : pool_r / on_host);
    }
    st = absl::ResourceExhaustedError(absl::StrCat(
        "this run does not fit in memory: rank ", world->rank(), " needs an estimated ",
        absl::StrFormat("%.2f", (per_device ? mine : mine + estimate.host_tables) / kGiB), " GiB",
        sharing > 1 ? absl::StrFormat(", %.2f GiB for the %d ranks on its host", need / kGiB, sharing) : "",
        ", but ", pool, "; lower --micro-batch or --seq-len, spread the model over more ranks "
        "(--tp, --pp), use --recompute mlp|attn|block, or pass --skip-memory-check to start "
        "anyway",
        refusal_detail(parts, stages, cap, o, shape, act_dtype, n)));
  }
  if (o.skip_memory_check && !st.ok()) {
    if (world->rank() == 0 || world->size() == 1)
      std::fprintf(stderr, "vtrain: warning (--skip-memory-check): %s\n", std::string(st.message()).c_str());
    st = absl::OkStatus();
  }
  return all_ok(world, st);
}

absl::StatusOr<int> eval_micro_batches(const std::string& data_dir, int64_t val_tokens, int64_t T,
                                       int micro_batch, int dp, int64_t max_tokens,
                                       const std::string& size_flag) {
  const int64_t rows_per_micro = static_cast<int64_t>(micro_batch) * dp;
  const int64_t rows = std::min<int64_t>(max_tokens / T, (val_tokens - 1) / T);
  const int64_t micro = rows / rows_per_micro;
  if (micro < 1)
    return absl::FailedPreconditionError(absl::StrCat(
        "an evaluation needs at least one batch of ", rows_per_micro, " rows x ", T + 1,
        " tokens (micro-batch ", micro_batch, " x data-parallel ", dp, ", sequence ", T,
        " + 1), but ",
        max_tokens / T < rows_per_micro
            ? absl::StrCat(size_flag, " ", max_tokens, " holds only ", max_tokens / T, " rows of ", T,
                           " tokens; raise ", size_flag, " to at least ", rows_per_micro * T)
            : absl::StrCat("the validation split of ", data_dir, " holds ", val_tokens,
                           " tokens; prepare with a larger --val-fraction"),
        ", or lower --micro-batch or --seq-len"));
  return static_cast<int>(std::min<int64_t>(micro, 1 << 30));
}

absl::Status check_eval_split(const std::string& data_dir, int64_t vocab_size, int64_t T,
                              int micro_batch, int dp, int64_t max_tokens, Communicator* world,
                              const std::string& size_flag) {
  absl::Status st;
  if (world->rank() == 0) {
    st = [&]() -> absl::Status {
      data::LoaderOptions lo;
      lo.vocab_size = vocab_size;
      VT_ASSIGN_OR_RETURN(data::DataLoader val, data::DataLoader::open(data_dir, "val", lo));
      VT_ASSIGN_OR_RETURN(const int micro, eval_micro_batches(data_dir, val.tokens_per_epoch(), T,
                                                              micro_batch, dp, max_tokens,
                                                              size_flag));
      // Read what the evaluation will read: the loader checks every id with file and offset.
      const int64_t rows = static_cast<int64_t>(micro_batch) * dp;
      std::vector<int32_t> in(rows * T), tg(rows * T);
      for (int m = 0; m < micro; ++m) VT_RETURN_IF_ERROR(val.next_batch_into(rows, T, 0, 1, in.data(), tg.data()));
      return absl::OkStatus();
    }();
  }
  return all_ok(world, st);
}

absl::Status check_train_ids(const data::BatchSource& train, Communicator* world) {
  absl::Status st;
  const std::vector<std::string>& paths = train.shard_paths();
  for (size_t i = world->rank(); i < paths.size() && st.ok(); i += world->size()) {
    auto r = data::ShardReader::open(paths[i]);
    st = r.ok() ? r->check_ids(train.vocab_size()) : r.status();
  }
  return all_ok(world, st);
}

}  // namespace vt
