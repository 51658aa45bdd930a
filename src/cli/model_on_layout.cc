// load_model_on_layout and the shared layout flags (model_on_layout.h).
#include "cli/model_on_layout.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "model/model_split.h"
#include "parallel/failure.h"
#include "train/options.h"
#include "train/settings.h"

namespace vt::cli {

namespace {
// The layout and device rows of the settings table (train/settings.h), with this command's help.
const char* const kLayoutSettings[] = {"tp", "pp", "vpp", "device", "act-dtype", "device-comm"};
FlagSpec setting_flag(const std::string& name, const std::string& help) {
  FlagSpec f = train_setting(name).flag;
  f.help = help;
  return f;
}
}  // namespace

std::vector<FlagSpec> layout_flag_specs() {
  return {
      flag_heading("layout and device"),
      setting_flag("tp", "tensor-parallel ranks (dp = ranks / (tp*pp))"),
      setting_flag("pp", "pipeline stages; any layout loads any checkpoint"),
      setting_flag("vpp", "model chunks per pipeline rank (the interleaved layout of `train --vpp`)"),
      setting_flag("device", "where the model runs"),
      setting_flag("act-dtype", "activations (default bf16 off the CPU)"),
      setting_flag("device-comm", "how device tensors cross ranks"),
  };
}

absl::StatusOr<std::unique_ptr<ModelOnLayout>> load_model_on_layout(const Flags& f,
                                                                    Communicator* world,
                                                                    const std::string& what) {
  auto m = std::make_unique<ModelOnLayout>();
  const std::string ckpt = f.get_string("ckpt");
  auto cfg_or = read_checkpoint_config(ckpt);
  VT_RETURN_IF_ERROR(all_ok(world, cfg_or.status()));
  auto meta_or = read_checkpoint_meta(ckpt);
  VT_RETURN_IF_ERROR(all_ok(world, meta_or.status()));
  m->cfg = *cfg_or;
  m->meta = *meta_or;
  const ModelConfig& cfg = m->cfg;
  TrainOptions o;
  o.tp = static_cast<int>(f.get_int("tp"));
  o.pp = static_cast<int>(f.get_int("pp"));
  o.vpp = static_cast<int>(f.get_int("vpp"));
  for (const char* name : kLayoutSettings) train_setting(name).read(f, o);
  if (!f.has("act-dtype")) o.act_dtype = o.device == RunDevice::kCPU ? DType::kF32 : DType::kBF16;
  auto shape = make_grid_shape(world->size(), o.tp, o.pp, model_split(cfg));
  if (!shape.ok()) return agreed(shape.status());
  if (absl::Status st = check_virtual_stages(cfg.n_layer, o.pp, o.vpp, -1); !st.ok())
    return agreed(st);
  // The data must be in the checkpoint's vocabulary.
  auto tok_or = tokenizer_for_checkpoint(ckpt, m->meta.extra, f.get_string("data"));
  VT_RETURN_IF_ERROR(all_ok(world, tok_or.status()));
  m->tok = std::move(*tok_or);
  if (m->tok->vocab_size() != cfg.vocab_size)
    return agreed(absl::InvalidArgumentError(absl::StrCat(
        f.has("data") ? absl::StrCat("--data ", f.get_string("data"), ": its tokenizer has ")
                      : std::string("the tokenizer has "),
        m->tok->vocab_size(), " tokens, the checkpoint's model ", cfg.vocab_size)));
  VT_ASSIGN_OR_RETURN(m->device, setup_device(o, world));
  m->grid = std::make_unique<ProcessGrid>(world, *shape);
  VT_ASSIGN_OR_RETURN(m->comm_desc, setup_device_comms(o, m->device, *m->grid));
  auto [layer_begin, layer_end] = stage_layers(cfg.n_layer, shape->pp, m->grid->coords().pp);
  ModelParallel par;
  par.tp = m->grid->tp();
  par.layer_begin = layer_begin;
  par.layer_end = layer_end;
  if (o.vpp > 1)
    par.chunks = virtual_stage_layers(cfg.n_layer, shape->pp, o.vpp, m->grid->coords().pp);
  m->model = std::make_unique<GPT>(cfg, par);
  m->model->register_params(m->store);
  m->store.finalize(m->device.device, m->device.act_dtype);
  {
    ParamStore host = m->store.device() == Device::kCPU ? m->store : m->store.host_mirror();
    VT_RETURN_IF_ERROR(
        load_checkpoint_params(ckpt, host, world->size() > 1 ? m->grid.get() : nullptr));
    if (m->store.device() != Device::kCPU) m->store.copy_params_from(host);
    m->store.refresh_compute_copy();
  }
  if (world->rank() == 0)
    std::printf("%s: %s (step %lld) | layout dp %d x tp %d x pp %d%s | %s | %s\n", what.c_str(),
                ckpt.c_str(), static_cast<long long>(m->meta.step), shape->dp, shape->tp,
                shape->pp, o.vpp > 1 ? absl::StrCat(" x vpp ", o.vpp).c_str() : "",
                m->device.description.c_str(), m->comm_desc.c_str());
  m->engine = std::make_unique<PipelineEngine>(*m->model, *m->grid);
  return m;
}

}  // namespace vt::cli
