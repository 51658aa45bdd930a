// ParamStore: registration and flat allocation of parameters and gradients.
#include "core/arena.h"

#include "core/ops.h"

namespace vt {

const char* param_group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::kMatrix: return "matrix";
    case ParamGroup::kEmbedding: return "embedding";
    case ParamGroup::kLmHead: return "lm_head";
    case ParamGroup::kValueTable: return "value_table";
    case ParamGroup::kScalar: return "scalar";
    case ParamGroup::kGain: return "gain";
  }
  return "?";
}

int ParamStore::add(const std::string& name, Shape shape, ParamGroup group, Shape global_shape,
                    ParamSplit split, ParamMeta meta) {
  VT_CHECK_MSG(!finalized_, "ParamStore::add after finalize: " << name);
  VT_CHECK_MSG(!by_name_.count(name), "duplicate parameter name " << name);
  ParamInfo info;
  info.name = name;
  info.shape = shape;
  info.global_shape = global_shape.empty() ? shape : global_shape;
  info.split = split;
  info.group = group;
  info.layer = meta.layer;
  info.pp_replicated = meta.pp_replicated;
  // Align every parameter to 16 floats so views stay 64-byte aligned.
  info.offset = total_;
  total_ += (info.numel() + 15) / 16 * 16;
  by_name_[name] = static_cast<int>(infos_.size());
  infos_.push_back(std::move(info));
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::finalize(Device device, DType compute) {
  VT_CHECK(!finalized_);
  VT_CHECK_MSG(compute == DType::kF32 || compute == DType::kBF16,
               "compute dtype must be f32 or bf16, got " << dtype_name(compute));
  device_ = device;
  compute_ = compute;
  params_ = Tensor::zeros({total_ > 0 ? total_ : 1}, DType::kF32, device);
  grads_ = Tensor::zeros({total_ > 0 ? total_ : 1}, DType::kF32, device);
  if (compute == DType::kBF16)
    compute_copy_ = Tensor::zeros({total_ > 0 ? total_ : 1}, DType::kBF16, device);
  finalized_ = true;
}

ParamStore ParamStore::host_mirror() const {
  VT_CHECK(finalized_);
  ParamStore h;
  h.infos_ = infos_;
  h.by_name_ = by_name_;
  h.total_ = total_;
  h.finalize(Device::kCPU, DType::kF32);
  h.params_.copy_from(params_);
  return h;
}

void ParamStore::copy_params_from(const ParamStore& src) {
  VT_CHECK(finalized_ && src.finalized_);
  VT_CHECK_MSG(src.total_ == total_ && src.infos_.size() == infos_.size(),
               "copy_params_from: the stores hold different parameters");
  params_.copy_from(src.params_);
  refresh_compute_copy();
}

Tensor ParamStore::compute_param(int i) const {
  VT_CHECK(finalized_);
  if (compute_ == DType::kF32) return param(i);
  const ParamInfo& p = infos_.at(i);
  return compute_copy_.flat(p.offset, p.numel()).reshaped(p.shape);
}

void ParamStore::refresh_compute_copy() {
  VT_CHECK(finalized_);
  if (compute_ == DType::kF32 || total_ == 0) return;
  ops::copy(compute_copy_.flat(0, total_), params_.flat(0, total_));
}

int ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

Tensor ParamStore::param(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  return params_.flat(p.offset, p.numel()).reshaped(p.shape);
}

Tensor ParamStore::grad(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  return grads_.flat(p.offset, p.numel()).reshaped(p.shape);
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
