// ParamRegistrar: how the model's pieces (the GPT, its block shapes, value modes, DenseFormer)
// register their parameters on one pipeline stage and one tensor-parallel rank. Each call names
// the parameter, its global shape, how it splits over TP, which layer owns it, whether every
// stage holds a replica, and its InitRule; the registrar computes the local shard and records
// the rule for GPT::init_params. Names and shapes are listed in docs/model.md.
#pragma once
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/config.h"
#include "model/init.h"

namespace vt {

class ParamRegistrar {
 public:
  ParamRegistrar(ParamStore& store, std::vector<InitRule>& rules, const ModelConfig& cfg,
                 int tp_size, int tp_rank)
      : store_(store), rules_(rules), cfg_(cfg), tp_(tp_size), rank_(tp_rank) {}

  const ModelConfig& config() const { return cfg_; }

  // A value path's or DenseFormer's coefficient, replicated over TP, in `group` (one of the
  // coefficient groups ParamGroup::kCoefMain, kCoefSkip, kCoefModel: the group its paper trains
  // it in, docs/model.md "Optimizer groups").
  int coef(const std::string& name, int64_t n, InitRule init, int layer, ParamGroup group,
           bool pp_replicated = false);
  // A block shape's gains, replicated over TP (AdamW's gain group).
  int gain(const std::string& name, int64_t n, InitRule init, int layer);
  // A block shape's per-head gains (H,), split over TP with the heads (gain group).
  int per_head_gain(const std::string& name, InitRule init, int layer);
  // Matrices split over TP by output columns (q/k/v heads, MLP hidden units) or by input rows
  // (W_O, W_proj). rows/cols are global; the split dimension must divide by tp.
  int matrix_cols(const std::string& name, int64_t rows, int64_t cols, InitRule init, int layer);
  int matrix_rows(const std::string& name, int64_t rows, int64_t cols, InitRule init, int layer);
  // A matrix replicated over TP (Muon group).
  int matrix(const std::string& name, int64_t rows, int64_t cols, InitRule init, int layer);
  // A (Vp, width) table split by vocabulary rows like wte (value-table group).
  int table(const std::string& name, int64_t width, InitRule init, int layer,
            bool pp_replicated = false);
  // The generic form.
  int add(const std::string& name, Shape global, ParamGroup group, int split_axis, InitRule init,
          ParamMeta meta);

 private:
  ParamStore& store_;
  std::vector<InitRule>& rules_;
  const ModelConfig& cfg_;
  int tp_, rank_;
};

}  // namespace vt
