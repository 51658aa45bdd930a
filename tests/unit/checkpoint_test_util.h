// Shared by the checkpoint tests (unit and MPI): small model configs, a deterministic "global"
// value for every element of every dataset, and filling / checking a local shard against the
// slice of those global tensors, computed independently of the checkpoint code.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/arena.h"
#include "model/config.h"

namespace vt::testing {

inline ModelConfig ckpt_config(ValueMode mode, const std::string& value_layers = "default",
                               bool shared_table = false, int n_layer = 4) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.vocab_size = 100;  // padded to 128
  c.seq_len = 16;
  c.value_mode = mode;
  c.value_layers = value_layers;
  c.shared_table = shared_table;
  EXPECT_TRUE(c.finalize().ok());
  return c;
}

// The value of element `i` (row-major) of the global tensor at `path`, for `salt`.
inline float global_value(const std::string& path, int64_t i, uint64_t salt = 0) {
  uint64_t h = 1469598103934665603ULL ^ salt;
  for (char ch : path) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  uint64_t z = h + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) / (1 << 23);
}

// Global flat index of local element k of a shard (local shape `local`, split of `global`).
inline int64_t global_index(const Shape& local, const Shape& global, const ParamSplit& split,
                            int64_t k) {
  int64_t g = 0, rem = k;
  std::vector<int64_t> idx(local.size());
  for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
    idx[d] = rem % local[d];
    rem /= local[d];
  }
  for (size_t d = 0; d < local.size(); ++d)
    g = g * global[d] + idx[d] + (static_cast<int>(d) == split.axis ? split.offset : 0);
  return g;
}

inline void fill_shard(float* data, const std::string& path, const Shape& local,
                       const Shape& global, const ParamSplit& split, uint64_t salt = 0) {
  for (int64_t k = 0; k < shape_numel(local); ++k)
    data[k] = global_value(path, global_index(local, global, split, k), salt);
}

// Number of elements of the shard that differ (bitwise) from the global tensor's slice.
inline int64_t shard_mismatches(const float* data, const std::string& path, const Shape& local,
                                const Shape& global, const ParamSplit& split, uint64_t salt = 0) {
  int64_t bad = 0;
  for (int64_t k = 0; k < shape_numel(local); ++k) {
    const float want = global_value(path, global_index(local, global, split, k), salt);
    bad += std::memcmp(&want, data + k, 4) != 0;
  }
  return bad;
}

// Optimizer-state-like tensors of a store: AdamW kinds for non-matrix groups, Muon's for
// matrices, each with the parameter's local shape and split.
struct StateSet {
  std::vector<Tensor> owned;
  std::vector<NamedTensor> named;
};
inline StateSet make_states(const ParamStore& store) {
  StateSet s;
  for (const ParamInfo& p : store.infos()) {
    const std::vector<std::string> kinds =
        p.group == ParamGroup::kMatrix ? std::vector<std::string>{"momentum_buffer"}
                                       : std::vector<std::string>{"exp_avg", "exp_avg_sq"};
    for (const std::string& kind : kinds) {
      s.owned.push_back(Tensor::zeros(p.shape));
      s.named.push_back(state_tensor(p, kind, s.owned.back()));
    }
  }
  return s;
}

inline void fill_store(const ParamStore& store, StateSet* states, uint64_t salt = 0) {
  for (int i = 0; i < store.size(); ++i) {
    const ParamInfo& p = store.info(i);
    fill_shard(store.param(i).f32(), "/model/" + p.name, p.shape, p.global_shape, p.split, salt);
  }
  if (states)
    for (const NamedTensor& t : states->named)
      fill_shard(t.tensor.f32(), t.path, t.tensor.shape(), t.global_shape, t.split, salt);
}

// Total mismatching elements over the store's parameters and the states.
inline int64_t store_mismatches(const ParamStore& store, const StateSet* states, uint64_t salt = 0) {
  int64_t bad = 0;
  for (int i = 0; i < store.size(); ++i) {
    const ParamInfo& p = store.info(i);
    bad += shard_mismatches(store.param(i).f32(), "/model/" + p.name, p.shape, p.global_shape,
                            p.split, salt);
  }
  if (states)
    for (const NamedTensor& t : states->named)
      bad += shard_mismatches(t.tensor.f32(), t.path, t.tensor.shape(), t.global_shape, t.split, salt);
  return bad;
}

}  // namespace vt::testing
