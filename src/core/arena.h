// Flat arenas for parameters, gradients and optimizer states. Every parameter is registered
// (name, local shape, global shape, optimizer group, how it is split), then the store allocates
// one contiguous f32 buffer per kind and hands out views. Contiguity lets data-parallel sync and
// checkpointing treat all parameters as one buffer.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace vt {

// Optimizer group of a parameter (MODEL.md section 3).
enum class ParamGroup : uint8_t {
  kMatrix,      // 2-D matrices inside the blocks: Muon
  kEmbedding,   // wte: AdamW
  kLmHead,      // W_lm: AdamW
  kValueTable,  // bov / bov-add / value-embed tables: AdamW
  kScalar,      // lambdas, gates, logits: AdamW
};
const char* param_group_name(ParamGroup g);

// How the local tensor relates to the global one (for checkpoints on any layout).
struct ParamSplit {
  int axis = -1;          // -1: replicated (local == global)
  int64_t offset = 0;     // start of the local slice along `axis` in the global tensor
};

struct ParamInfo {
  std::string name;
  Shape shape;          // local shape
  Shape global_shape;   // shape of the whole parameter
  ParamSplit split;
  ParamGroup group = ParamGroup::kMatrix;
  int64_t offset = 0;   // element offset in the arena
  int64_t numel() const { return shape_numel(shape); }
};

class ParamStore {
 public:
  // Registers a parameter; returns its index. Must be called before finalize().
  int add(const std::string& name, Shape shape, ParamGroup group, Shape global_shape = {},
          ParamSplit split = {});
  // Allocates the param and grad arenas (zero-filled).
  void finalize();
  bool finalized() const { return finalized_; }

  int size() const { return static_cast<int>(infos_.size()); }
  const ParamInfo& info(int i) const { return infos_.at(i); }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int find(const std::string& name) const;  // -1 when absent

  Tensor param(int i) const;
  Tensor grad(int i) const;
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;

  int64_t total_numel() const { return total_; }
  float* param_data() const { return params_.f32(); }
  float* grad_data() const { return grads_.f32(); }
  void zero_grads() { grads_.zero_(); }

 private:
  std::vector<ParamInfo> infos_;
  std::map<std::string, int> by_name_;
  int64_t total_ = 0;
  bool finalized_ = false;
  Tensor params_;
  Tensor grads_;
};

}  // namespace vt
