// TrainOptions as JSON (see options.h); the flags that fill it are cli/train_flags.cc.
#include "train/options.h"

#include <filesystem>

namespace vt {

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json sources = nlohmann::json::array();
  if (data.is_mixture())
    for (size_t k = 0; k < data.sources.size(); ++k)
      sources.push_back({{"name", data.sources[k].name}, {"dir", data.sources[k].dir},
                         {"weight", data.stages[0].weights[k]}});
  return {{"data_dir", data_dir},       {"data_sources", sources},       {"tp", tp},
          {"pp", pp},                   {"vpp", vpp},
          {"micro_batch", micro_batch},
          {"global_batch", global_batch}, {"steps", steps},
          {"eval_every", eval_every},   {"eval_tokens", eval_tokens},
          {"final_eval_tokens", final_eval_tokens},
          {"seed", seed},               {"matrix_lr", matrix_lr}, {"scalar_lr", scalar_lr}, {"gain_lr", gain_lr},
          {"lr_scale", lr_scale},       {"warmup_steps", warmup_steps},
          {"warmdown_frac", warmdown_frac}, {"max_grad_norm", max_grad_norm},
          {"final_lr_frac", final_lr_frac}, {"optimizer", optimizer},
          {"adamw_lr", adamw_lr},       {"weight_decay", weight_decay},
          {"polar_express", polar_express}, {"device", device},
          {"muon_wd", muon_wd}, {"muon_wd_style", muon_wd_style}, {"muon_wd_scale", muon_wd_scale},
          {"muon_momentum", muon_momentum}, {"lr_batch_scale", lr_batch_scale},
          {"coef_optim", coef_optim},
          {"act_dtype", act_dtype}, {"device_comm", device_comm}, {"recompute", recompute_name(recompute)}, {"fp8", fp8},
          {"table_offload", table_offload}, {"grad_sync", grad_sync}, {"zero", zero},
          {"cuda_graphs", cuda_graphs},
          {"muon_ns_dtype", muon_ns_dtype}, {"core_every", core_every}, {"core_dir", core_dir}};
}

std::string TrainOptions::run_identity() const {
  namespace fs = std::filesystem;
  // Without --ckpt-dir: the directory of --resume PATH ("." for a bare file name). Chosen in one
  // expression: assigning "." to the string afterwards makes g++ 12 at -O3 warn -Wrestrict (a
  // false positive, GCC bug 105329).
  const bool resume_path = resume != "none" && resume != "auto";
  const std::string resume_dir = resume_path ? fs::path(resume).parent_path().string() : std::string();
  const std::string dir = !ckpt_dir.empty()                  ? ckpt_dir
                          : !resume_dir.empty() || !resume_path ? resume_dir
                                                               : std::string(".");
  if (dir.empty()) return "";
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return ec ? dir : p.string();
}

}  // namespace vt
