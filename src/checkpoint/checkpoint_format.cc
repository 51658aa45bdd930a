// The datasets and paths of a checkpoint file (see checkpoint_format.h).
#include "checkpoint/checkpoint_format.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/muon.h"

namespace vt {

std::string optim_state_path(const std::string& param, const std::string& kind) {
  return absl::StrCat("/optim/", param, "/", kind);
}

NamedTensor state_tensor(const ParamInfo& param, const std::string& kind, Tensor local) {
  return {optim_state_path(param.name, kind), std::move(local), param.global_shape, param.split};
}

namespace {
std::vector<ParamInfo> registered_params(const ModelConfig& config) {
  ModelConfig cfg = config;
  if (cfg.vocab_padded == 0 && !cfg.finalize().ok()) return {};
  ParamStore store;  // registration only: no memory
  GPT model(cfg);
  model.register_params(store);
  return store.infos();
}
}  // namespace

std::vector<std::pair<std::string, Shape>> model_datasets(const ModelConfig& config) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const ParamInfo& p : registered_params(config)) out.push_back({"/model/" + p.name, p.global_shape});
  return out;
}

std::vector<std::pair<std::string, Shape>> optimizer_datasets(const ModelConfig& config,
                                                              bool adamw_matrices) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const ParamInfo& p : registered_params(config))
    for (const std::string& kind : !adamw_matrices && optim::muon_handles(p.group)
                                       ? optim::muon_state_kinds()
                                       : optim::adamw_state_kinds())
      out.push_back({optim_state_path(p.name, kind), p.global_shape});
  return out;
}

bool matrices_in_adamw(const ModelConfig& config, const std::set<std::string>& present) {
  for (const ParamInfo& p : registered_params(config))
    if (optim::muon_handles(p.group))
      return present.count(optim_state_path(p.name, optim::adamw_state_kinds().front())) > 0;
  return false;
}

std::vector<std::string> config_differences(const ModelConfig& checkpoint, const ModelConfig& model) {
  const nlohmann::json a = checkpoint.to_json(), b = model.to_json();
  std::set<std::string> keys;
  for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
  for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    const nlohmann::json va = a.value(k, nlohmann::json()), vb = b.value(k, nlohmann::json());
    if (va != vb) out.push_back(absl::StrCat(k, ": checkpoint ", va.dump(), ", model ", vb.dump()));
  }
  return out;
}

}  // namespace vt
