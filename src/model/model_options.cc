// The gathered model options (see model_options.h).
#include "model/model_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/block_shape.h"
#include "model/config.h"
#include "model/value_path.h"

namespace vt {

namespace {
// Adds `o` (declared by `owner`) to `out`, or the owner to the entry of the same flag.
void gather(std::vector<DeclaredOption>& out, const ModelOption& o, const std::string& owner) {
  for (DeclaredOption& d : out)
    if (d.option.flag.name == o.flag.name) {
      d.owners.push_back(owner);
      return;
    }
  out.push_back({o, {owner}});
}
}  // namespace

std::vector<DeclaredOption> value_mode_options() {
  std::vector<DeclaredOption> out;
  for (ValueMode m : all_value_modes())
    for (const ModelOption& o : value_path(m).options()) gather(out, o, value_path(m).name());
  return out;
}

std::vector<DeclaredOption> block_shape_options() {
  std::vector<DeclaredOption> out;
  for (BlockShapeKind s : all_block_shapes())
    for (const ModelOption& o : block_shape(s).options()) gather(out, o, block_shape(s).name());
  return out;
}

std::vector<ModelOption> shared_value_options() {
  return {{bool_flag("detach-v1", "stop the gradient through V1"),
           [](const Flags& f, ModelConfig& cfg) { cfg.detach_v1 = f.get_bool("detach-v1"); }}};
}

std::vector<ModelOption> shared_block_options() {
  return {{no_default(choice_flag("qk-norm", "", {"on", "off"},
                                  "QK-norm (default: on, off for vskipinit, sas and sas-p)")),
           [](const Flags& f, ModelConfig& cfg) {
             if (f.has("qk-norm")) cfg.qk_norm = f.get_string("qk-norm") == "on" ? 1 : 0;
           }},
          {choice_flag("mlp-act", "relu2", {"relu2", "relu"},
                       "the MLP's activation: relu2 (max(x,0)^2) or relu (the SAS paper's)"),
           [](const Flags& f, ModelConfig& cfg) { cfg.mlp_act = f.get_string("mlp-act"); }}};
}

std::vector<ModelOption> dense_options() {
  return {
      {bool_flag("dense", "DenseFormer: depth-weighted averages of earlier block outputs"),
       [](const Flags& f, ModelConfig& cfg) { cfg.dense = f.get_bool("dense"); }},
      {no_default(config_field_flag("dense_dilation", 1, "DenseFormer: every k-th earlier output")),
       [](const Flags& f, ModelConfig& cfg) {
         if (f.has("dense-dilation"))
           cfg.dense_dilation = static_cast<int>(f.get_int("dense-dilation"));
       }},
      {no_default(config_field_flag(
           "dense_period", 1, "DenseFormer: an average after every p-th block (divides --layers)")),
       [](const Flags& f, ModelConfig& cfg) {
         if (f.has("dense-period")) cfg.dense_period = static_cast<int>(f.get_int("dense-period"));
       }},
  };
}

absl::Status apply_model_options(const Flags& f, ModelConfig& cfg) {
  const std::string mode = value_mode_name(cfg.value_mode);
  for (const DeclaredOption& d : value_mode_options()) {
    const std::string& name = d.option.flag.name;
    if (f.has(name) && std::find(d.owners.begin(), d.owners.end(), mode) == d.owners.end())
      return absl::InvalidArgumentError(absl::StrCat("--", name, " applies only to --value ",
                                                     absl::StrJoin(d.owners, " or --value ")));
    d.option.apply(f, cfg);
  }
  for (const ModelOption& o : shared_value_options()) o.apply(f, cfg);
  for (const ModelOption& o : shared_block_options()) o.apply(f, cfg);
  for (const DeclaredOption& d : block_shape_options()) d.option.apply(f, cfg);
  if (!f.get_bool("dense") && (f.has("dense-dilation") || f.has("dense-period")))
    return absl::InvalidArgumentError("--dense-dilation and --dense-period need --dense");
  for (const ModelOption& o : dense_options()) o.apply(f, cfg);
  return absl::OkStatus();
}

}  // namespace vt
