// Optimizer facade: schedules, clipping, and dispatch of parameter groups to AdamW and Muon.
#include "optim/optimizer.h"

#include "core/check.h"
#include "optim/clip.h"

namespace vt::optim {

OptimizerConfig OptimizerConfig::defaults(int64_t d_model) {
  OptimizerConfig c;
  c.adamw = AdamWConfig::defaults(d_model);
  return c;
}

namespace {
nlohmann::json hyper_json(const AdamWHyper& h) {
  return {{"lr", h.lr}, {"beta1", h.beta1}, {"beta2", h.beta2},
          {"weight_decay", h.weight_decay}, {"eps", h.eps}};
}
}  // namespace

nlohmann::json OptimizerConfig::to_json() const {
  nlohmann::json j;
  j["adamw"] = {{"embedding", hyper_json(adamw.embedding)},
                {"lm_head", hyper_json(adamw.lm_head)},
                {"value_table", hyper_json(adamw.value_table)},
                {"scalar", hyper_json(adamw.scalar)},
                {"gain", hyper_json(adamw.gain)}};
  j["muon"] = {{"lr", muon.lr},
               {"weight_decay", muon.weight_decay},
               {"ns_steps", muon.ns_steps},
               {"ns", ns_kind_name(muon.ns)},
               {"aspect", muon.aspect == MuonAspect::kFanOutOverFanIn ? "fan_out_over_fan_in"
                                                                      : "rows_over_cols"}};
  j["schedule"] = {{"warmup_steps", schedule.warmup_steps},
                   {"warmdown_frac", schedule.warmdown_frac},
                   {"final_lr_frac", schedule.final_lr_frac},
                   {"momentum_start", schedule.momentum_start},
                   {"momentum_end", schedule.momentum_end},
                   {"momentum_steps", schedule.momentum_steps}};
  j["max_grad_norm"] = max_grad_norm;
  return j;
}

Optimizer::Optimizer(ParamStore* store, OptimizerConfig config)
    : store_(store), config_(config), adamw_(store, config.adamw), muon_(store, config.muon) {}

StepStats Optimizer::step(int64_t step_index, int64_t total_steps,
                          std::optional<double> global_grad_norm) {
  StepStats s;
  s.step = step_index;
  s.lr_multiplier = lr_multiplier(config_.schedule, step_index, total_steps);
  s.momentum = muon_momentum(config_.schedule, step_index);
  s.matrix_lr = config_.muon.lr * s.lr_multiplier;
  s.grad_norm = global_grad_norm ? *global_grad_norm : grad_norm(*store_);
  s.clip_scale = clip_scale(s.grad_norm, config_.max_grad_norm);
  scale_grads(*store_, s.clip_scale);
  adamw_.step(s.lr_multiplier);
  muon_.step(s.lr_multiplier, s.momentum);
  store_->refresh_compute_copy();
  return s;
}

const std::vector<std::string>& Optimizer::state_kinds(const std::string& name) const {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "Optimizer::state_kinds: no parameter named " << name);
  return Muon::handles(store_->info(i).group) ? Muon::state_kinds() : AdamW::state_kinds();
}

Tensor Optimizer::state(const std::string& name, const std::string& kind) const {
  const int i = store_->find(name);
  VT_CHECK_MSG(i >= 0, "Optimizer::state: no parameter named " << name);
  return Muon::handles(store_->info(i).group) ? muon_.state(name, kind) : adamw_.state(name, kind);
}

void Optimizer::set_step_count(int64_t t) {
  VT_CHECK_MSG(t >= 0, "step count must be >= 0, got " << t);
  adamw_.set_step_count(t);
  muon_.set_step_count(t);
}

}  // namespace vt::optim
