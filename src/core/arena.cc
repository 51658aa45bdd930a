// ParamStore: registration and flat allocation of parameters and gradients.
#include "core/arena.h"

namespace vt {

const char* param_group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::kMatrix: return "matrix";
    case ParamGroup::kEmbedding: return "embedding";
    case ParamGroup::kLmHead: return "lm_head";
    case ParamGroup::kValueTable: return "value_table";
    case ParamGroup::kScalar: return "scalar";
  }
  return "?";
}

int ParamStore::add(const std::string& name, Shape shape, ParamGroup group, Shape global_shape,
                    ParamSplit split) {
  VT_CHECK_MSG(!finalized_, "ParamStore::add after finalize: " << name);
  VT_CHECK_MSG(!by_name_.count(name), "duplicate parameter name " << name);
  ParamInfo info;
  info.name = name;
  info.shape = shape;
  info.global_shape = global_shape.empty() ? shape : global_shape;
  info.split = split;
  info.group = group;
  // Align every parameter to 16 floats so views stay 64-byte aligned.
  info.offset = total_;
  total_ += (info.numel() + 15) / 16 * 16;
  by_name_[name] = static_cast<int>(infos_.size());
  infos_.push_back(std::move(info));
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::finalize() {
  VT_CHECK(!finalized_);
  params_ = Tensor::zeros({total_ > 0 ? total_ : 1});
  grads_ = Tensor::zeros({total_ > 0 ? total_ : 1});
  finalized_ = true;
}

int ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

Tensor ParamStore::param(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  return Tensor::view(params_.f32() + p.offset, p.shape);
}

Tensor ParamStore::grad(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  return Tensor::view(grads_.f32() + p.offset, p.shape);
}

Tensor ParamStore::param(const std::string& name) const {
  int i = find(name);
  VT_CHECK_MSG(i >= 0, "no parameter named " << name);
  return param(i);
}

Tensor ParamStore::grad(const std::string& name) const {
  int i = find(name);
  VT_CHECK_MSG(i >= 0, "no parameter named " << name);
  return grad(i);
}

}  // namespace vt
