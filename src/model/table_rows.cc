// TableRows: gathering the rows of host-kept value tables a pass reads, and returning their
// gradients (see table_rows.h).
#include "model/table_rows.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace vt {

void TableRows::prepare(const ParamStore& store, const std::vector<int>& tables, int64_t row_begin,
                        int64_t rows, Device device, const std::vector<const int32_t*>& micro_batches,
                        int64_t n_each, bool with_grads) {
  clear();
  device_ = device;
  row_begin_ = row_begin;
  with_grads_ = with_grads;
  // The union of the ids this rank owns, in increasing row order (the same on every run).
  compact_.assign(static_cast<size_t>(rows), -1);
  for (const int32_t* ids : micro_batches)
    for (int64_t n = 0; n < n_each; ++n) {
      const int64_t r = static_cast<int64_t>(ids[n]) - row_begin;
      if (r >= 0 && r < rows) compact_[r] = 0;
    }
  for (int64_t r = 0; r < rows; ++r)
    if (compact_[r] == 0) {
      compact_[r] = static_cast<int32_t>(rows_.size());
      rows_.push_back(r);
    }
  const int64_t U = std::max<int64_t>(1, static_cast<int64_t>(rows_.size()));
  std::vector<const float*> sources;
  for (int t : tables) {
    const ParamInfo& info = store.info(t);
    VT_CHECK_MSG(info.host && info.shape.size() == 2 && info.shape[0] == rows,
                 "TableRows: " << info.name << " is not a host-kept table of " << rows << " rows");
    const int64_t W = info.shape[1];
    Table tab;
    tab.param = t;
    tab.host = Tensor::empty({U, W});
    if (U > static_cast<int64_t>(rows_.size())) tab.host.zero_();  // the one zero row of U = 1
    if (with_grads) tab.grad = Tensor::zeros({U, W}, DType::kF32, device);
    tables_.push_back(std::move(tab));
    sources.push_back(store.param(t).f32());
  }
  active_ = true;
  // The rows are gathered beside the forward (value tables serve later layers: BoV's last
  // third); the first lookup waits for them (ready()). On the CPU the gather runs in line.
  auto gather = [this, sources, parallel = device == Device::kCPU] {
    const int64_t used = static_cast<int64_t>(rows_.size());
    for (size_t k = 0; k < tables_.size(); ++k) {
      const int64_t W = tables_[k].host.dim(1);
      float* dst = tables_[k].host.f32();
      const float* src = sources[k];
#pragma omp parallel for schedule(static) if (parallel && used * W >= (int64_t{1} << 16))
      for (int64_t u = 0; u < used; ++u)
        std::memcpy(dst + u * W, src + rows_[u] * W, sizeof(float) * W);
    }
  };
  if (device == Device::kCPU)
    gather();
  else
    gather_ = std::thread(gather);
}

void TableRows::ready() const {
  if (uploaded_) return;
  if (gather_.joinable()) gather_.join();
  for (Table& t : tables_) t.rows = device_ == Device::kCPU ? t.host : t.host.to(device_);
  uploaded_ = true;
}

bool TableRows::holds(int table) const {
  for (const Table& t : tables_)
    if (t.param == table) return true;
  return false;
}

Tensor TableRows::compact_ids(const int32_t* ids, int64_t n) const {
  VT_CHECK(active_);
  std::vector<int32_t> c(static_cast<size_t>(n));
  const int64_t rows = static_cast<int64_t>(compact_.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(ids[i]) - row_begin_;
    c[i] = r >= 0 && r < rows ? compact_[r] : -1;
    VT_CHECK_MSG(r < 0 || r >= rows || c[i] >= 0,
                 "token id " << ids[i] << " was not among the ids the value-table rows were gathered for");
  }
  return Tensor::from_host(c.data(), {n}, device_);
}

const Tensor& TableRows::rows(int table) const {
  ready();
  for (const Table& t : tables_)
    if (t.param == table) return t.rows;
  VT_CHECK_MSG(false, "TableRows: table " << table << " was not prepared");
  return tables_.front().rows;
}

const Tensor& TableRows::grad(int table) const {
  for (const Table& t : tables_)
    if (t.param == table) {
      VT_CHECK_MSG(t.grad.defined(), "TableRows: prepared without gradients");
      return t.grad;
    }
  VT_CHECK_MSG(false, "TableRows: table " << table << " was not prepared");
  return tables_.front().grad;
}

void TableRows::finish(const ParamStore& store) {
  if (active_ && with_grads_) {
    const int64_t used = static_cast<int64_t>(rows_.size());
    for (const Table& t : tables_) {
      const int64_t W = t.grad.dim(1);
      const std::vector<float> g = t.grad.to_host_f32();
      float* dst = store.grad(t.param).f32();
#pragma omp parallel for schedule(static) if (used * W >= (int64_t{1} << 16))
      for (int64_t u = 0; u < used; ++u) {
        float* d = dst + rows_[u] * W;
        const float* s = g.data() + u * W;
        for (int64_t c = 0; c < W; ++c) d[c] += s[c];
      }
    }
  }
  clear();
}

void TableRows::clear() {
  if (gather_.joinable()) gather_.join();
  active_ = with_grads_ = uploaded_ = false;
  rows_.clear();
  compact_.clear();
  tables_.clear();
}

}  // namespace vt
