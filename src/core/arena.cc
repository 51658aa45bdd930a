// ParamStore: registration and flat allocation of parameters and gradients.
#include "core/arena.h"

#include <algorithm>

#include "core/ops.h"

namespace vt {

const char* param_group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::kMatrix: return "matrix";
    case ParamGroup::kEmbedding: return "embedding";
    case ParamGroup::kLmHead: return "lm_head";
    case ParamGroup::kValueTable: return "value_table";
    case ParamGroup::kScalar: return "scalar";
    case ParamGroup::kSmear: return "smear";
    case ParamGroup::kGain: return "gain";
    case ParamGroup::kCoefMain: return "coef_main";
    case ParamGroup::kCoefSkip: return "coef_skip";
    case ParamGroup::kCoefModel: return "coef_model";
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
  info.host = std::find(host_groups_.begin(), host_groups_.end(), group) != host_groups_.end();
  // Align every parameter to 16 floats so views stay 64-byte aligned.
  int64_t& end = info.host ? host_total_ : total_;
  info.offset = end;
  end += (info.numel() + 15) / 16 * 16;
  by_name_[name] = static_cast<int>(infos_.size());
  infos_.push_back(std::move(info));
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::keep_in_host_memory(ParamGroup group) {
  VT_CHECK_MSG(infos_.empty(), "keep_in_host_memory after parameters were added");
  host_groups_.push_back(group);
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
  if (host_total_ > 0) {
    host_params_ = Tensor::zeros({host_total_}, DType::kF32, Device::kCPU);
    host_grads_ = Tensor::zeros({host_total_}, DType::kF32, Device::kCPU);
  }
  finalized_ = true;
}

ParamStore ParamStore::host_mirror() const {
  VT_CHECK(finalized_);
  ParamStore h;
  h.infos_ = infos_;
  h.by_name_ = by_name_;
  h.total_ = total_;
  h.host_total_ = host_total_;
  h.host_groups_ = host_groups_;
  // Not finalize(): no gradient arena and no zero fill of storage the copy overwrites (a snapshot
  // for --async-save is taken while training waits).
  h.device_ = Device::kCPU;
  h.compute_ = DType::kF32;
  h.params_ = Tensor::empty({total_ > 0 ? total_ : 1}, DType::kF32, Device::kCPU);
  h.params_.copy_from(params_);
  if (host_total_ > 0) {
    h.host_params_ = Tensor::empty({host_total_}, DType::kF32, Device::kCPU);
    h.host_params_.copy_from(host_params_);
  }
  h.finalized_ = true;
  return h;
}

void ParamStore::copy_params_from(const ParamStore& src) {
  VT_CHECK(finalized_ && src.finalized_);
  VT_CHECK_MSG(src.infos_.size() == infos_.size(),
               "copy_params_from: the stores hold different parameters");
  if (src.total_ == total_ && src.host_total_ == host_total_) {
    params_.copy_from(src.params_);
    if (host_total_ > 0) host_params_.copy_from(src.host_params_);
  } else {  // the same parameters placed differently (one store keeps some in host memory)
    for (int i = 0; i < size(); ++i) {
      VT_CHECK_MSG(src.infos_[i].name == infos_[i].name && src.infos_[i].shape == infos_[i].shape,
                   "copy_params_from: the stores hold different parameters");
      param(i).copy_from(src.param(i));
    }
  }
  refresh_compute_copy();
}

Tensor ParamStore::compute_param(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  if (compute_ == DType::kF32 || p.host) return param(i);
  return compute_copy_.flat(p.offset, p.numel()).reshaped(p.shape);
}

void ParamStore::refresh_compute_copy() {
  VT_CHECK(finalized_);
  if (compute_ == DType::kF32 || total_ == 0) return;
  ops::copy(compute_copy_.flat(0, total_), params_.flat(0, total_));
}

void ParamStore::refresh_compute_copy(const std::vector<char>& fresh) {
  VT_CHECK(finalized_);
  VT_CHECK(fresh.size() == infos_.size());
  if (compute_ == DType::kF32 || total_ == 0) return;
  // Device parameters lie in the arena in registration order, each at its offset: a run of
  // stale neighbours is one contiguous range (gaps of host-kept or fresh ones end it).
  int64_t begin = -1, end = -1;
  auto flush = [&] {
    if (begin >= 0 && end > begin)
      ops::copy(compute_copy_.flat(begin, end - begin), params_.flat(begin, end - begin));
    begin = end = -1;
  };
  for (size_t i = 0; i < infos_.size(); ++i) {
    const ParamInfo& p = infos_[i];
    if (p.host) continue;
    if (fresh[i]) {
      flush();
      continue;
    }
    if (begin >= 0 && p.offset != end) flush();
    if (begin < 0) begin = p.offset;
    end = p.offset + p.numel();
  }
  flush();
}

bool ParamStore::holds_weights(const Tensor& t) const {
  if (!finalized_ || !t.defined() || t.numel() == 0) return false;
  const char* p = static_cast<const char*>(t.raw());
  auto inside = [&](const Tensor& arena) {
    if (!arena.defined()) return false;
    const char* a = static_cast<const char*>(arena.raw());
    return p >= a && p + t.nbytes() <= a + arena.nbytes();
  };
  return inside(params_) || inside(compute_copy_);
}

Tensor ParamStore::compute_copy_flat(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  if (compute_ == DType::kF32 || p.host) return Tensor();
  return compute_copy_.flat(p.offset, p.numel());
}

void ParamStore::zero_grads() {
  grads_.zero_();
  if (host_grads_.defined()) host_grads_.zero_();
  std::fill(unwritten_.begin(), unwritten_.end(), 0);
}

void ParamStore::set_overwrite_first(const std::vector<int>& params) {
  VT_CHECK(finalized_);
  overwrite_first_.assign(infos_.size(), 0);
  unwritten_.assign(infos_.size(), 0);
  zero_runs_.clear();
  for (int i : params) {
    VT_CHECK_MSG(!infos_.at(i).host,
                 "set_overwrite_first: " << infos_[i].name << " is kept in host memory");
    overwrite_first_[i] = 1;
  }
  // The device arena less the named gradients' elements, in maximal ranges (alignment padding
  // included: the arena outside the gradients stays zero).
  std::vector<int> order;
  for (int i = 0; i < size(); ++i)
    if (!infos_[i].host) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return infos_[a].offset < infos_[b].offset; });
  int64_t begin = 0;
  for (int i : order)
    if (overwrite_first_[i]) {
      if (infos_[i].offset > begin) zero_runs_.emplace_back(begin, infos_[i].offset - begin);
      begin = infos_[i].offset + infos_[i].numel();
    }
  if (total_ > begin) zero_runs_.emplace_back(begin, total_ - begin);
}

void ParamStore::begin_gradients() {
  VT_CHECK(finalized_);
  if (overwrite_first_.empty()) return zero_grads();
  for (const auto& [offset, n] : zero_runs_)
    if (n > 0) grads_.flat(offset, n).zero_();
  if (host_grads_.defined()) host_grads_.zero_();
  unwritten_ = overwrite_first_;
}

bool ParamStore::take_first_write(int i) {
  if (unwritten_.empty() || !unwritten_.at(i)) return false;
  unwritten_[i] = 0;
  return true;
}

void ParamStore::zero_unwritten(int layer) {
  for (size_t i = 0; i < unwritten_.size(); ++i)
    if (unwritten_[i] && (layer == kAllLayers || infos_[i].layer == layer)) {
      grad(static_cast<int>(i)).zero_();
      unwritten_[i] = 0;
    }
}

int ParamStore::unwritten_count() const {
  return static_cast<int>(std::count(unwritten_.begin(), unwritten_.end(), 1));
}

int ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

Tensor ParamStore::param(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  return (p.host ? host_params_ : params_).flat(p.offset, p.numel()).reshaped(p.shape);
}

Tensor ParamStore::grad(int i) const {
  VT_CHECK(finalized_);
  const ParamInfo& p = infos_.at(i);
  return (p.host ? host_grads_ : grads_).flat(p.offset, p.numel()).reshaped(p.shape);
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
