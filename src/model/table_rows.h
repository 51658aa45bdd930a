// TableRows: the rows of the value tables kept in host memory (--table-offload, docs/design.md
// "Value tables in host memory") that one step or one evaluation pass reads, on the model's
// device. The token ids of every micro-batch are known before the pass, so the rows this rank
// owns (its vocabulary shard) of the ids' union are gathered from the host tables (on a side
// thread beside the forward when the model is on a device), copied to the device once at the
// first lookup, and looked up there through compact ids (a token's position in the
// union, -1 for ids of another shard: zero rows, as for an id outside a shard's range). The
// backward scatter-adds into a compact gradient of the same rows; finish() adds it into the host
// gradients. The compact gradient sums a row's contributions in the same order as a whole table
// would, and the host gradients start the step at zero, so the result is the same floats.
#pragma once
#include <cstdint>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"

namespace vt {

class TableRows {
 public:
  // Gathers, for each table (store indices of host-kept tables, rows [row_begin, row_begin +
  // rows) of the vocabulary, `width` columns each), the rows the ids of `micro_batches` (each
  // `n_each` token ids) touch, onto `device`; zero gradients when `with_grads`.
  void prepare(const ParamStore& store, const std::vector<int>& tables, int64_t row_begin,
               int64_t rows, Device device, const std::vector<const int32_t*>& micro_batches,
               int64_t n_each, bool with_grads);
  bool active() const { return active_; }
  bool holds(int table) const;
  // The compact ids of n token ids (i32 on the prepared device).
  Tensor compact_ids(const int32_t* ids, int64_t n) const;
  // (U, width) rows of a prepared table (waiting for the gather and copying them to the device
  // on first use), and their gradient (U >= 1: one zero row when the ids touch none of this
  // rank's rows).
  const Tensor& rows(int table) const;
  const Tensor& grad(int table) const;
  int64_t unique_rows() const { return static_cast<int64_t>(rows_.size()); }
  // Adds the compact gradients into the store's host gradients (when prepared with grads) and
  // releases the device rows.
  void finish(const ParamStore& store);
  void clear();

  // A copy (GPT::with_seq_len's view) starts with nothing prepared: the original's rows and
  // gathering thread stay its own.
  TableRows() = default;
  TableRows(const TableRows&) {}
  TableRows& operator=(const TableRows& other) {
    if (this != &other) clear();
    return *this;
  }
  ~TableRows() { clear(); }

 private:
  struct Table {
    int param = -1;
    Tensor host;  // (U, width) gathered rows in host memory
    Tensor rows, grad;  // on the device (rows: after ready())
  };
  void ready() const;  // waits for the gather, copies the rows to the device (once)
  bool active_ = false, with_grads_ = false;
  mutable bool uploaded_ = false;
  mutable std::thread gather_;
  Device device_ = Device::kCPU;
  int64_t row_begin_ = 0;
  std::vector<int64_t> rows_;    // [u] = local row (id - row_begin) of compact index u
  std::vector<int32_t> compact_; // [local row] = u, or -1 when the pass reads no such row
  mutable std::vector<Table> tables_;
};

}  // namespace vt
