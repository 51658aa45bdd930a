// The optimizer's configuration: defaults and JSON (see optimizer.h).
#include "optim/optimizer.h"


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
                {"gain", hyper_json(adamw.gain)},
                {"matrix", hyper_json(adamw.matrix)},
                {"smear", hyper_json(adamw.smear)},
                {"coef_main", hyper_json(adamw.coef_main)},
                {"coef_skip", hyper_json(adamw.coef_skip)},
                {"coef_model", hyper_json(adamw.coef_model)}};
  j["optimizer"] = adamw_matrices ? "adamw" : "muon";
  j["muon"] = {{"lr", muon.lr},
               {"weight_decay", muon.weight_decay},
               {"wd_style", muon.wd_style == MuonWdStyle::kNanochat ? "nanochat" : "decoupled"},
               {"ns_steps", muon.ns_steps},
               {"ns", ns_kind_name(muon.ns)},
               {"aspect", muon.aspect == MuonAspect::kFanOutOverFanIn ? "fan_out_over_fan_in"
                                                                      : "rows_over_cols"}};
  j["schedule"] = {{"warmup_steps", schedule.warmup_steps},
                   {"warmdown_frac", schedule.warmdown_frac},
                   {"final_lr_frac", schedule.final_lr_frac},
                   {"momentum_start", schedule.momentum_start},
                   {"momentum_end", schedule.momentum_end},
                   {"momentum_steps", schedule.momentum_steps},
                   {"momentum_schedule", schedule.momentum_schedule == MomentumSchedule::kNanochat
                                             ? "nanochat"
                                             : "warmup"}};
  j["max_grad_norm"] = max_grad_norm;
  return j;
}

}  // namespace vt::optim
