// load_model_on_layout and the shared layout flags (model_on_layout.h).
#include "cli/model_on_layout.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "model/model_split.h"
#include "parallel/failure.h"
#include "train/options.h"

namespace vt::cli {

std::vector<FlagSpec> layout_flag_specs() {
  return {
      flag_heading("layout and device"),
      int_flag("tp", 1, 1, 1 << 20, "tensor-parallel ranks (dp = ranks / (tp*pp))"),
      int_flag("pp", 1, 1, 1 << 20, "pipeline stages; any layout loads any checkpoint"),
      int_flag("vpp", 1, 1, 1 << 20,
               "model chunks per pipeline rank (the interleaved layout of `train --vpp`)"),
      choice_flag("device", "cpu", {"cpu", "cuda", "emulated"}, "where the model runs"),
      choice_flag("act-dtype", "", {"f32", "bf16"}, "activations (default bf16 off the CPU)"),
      choice_flag("device-comm", "auto", {"auto", "nccl", "mpi"}, "how device tensors cross ranks"),
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
  o.device = f.get_string("device");
  o.act_dtype = f.get_string("act-dtype");
  if (o.act_dtype.empty()) o.act_dtype = o.device == "cpu" ? "f32" : "bf16";
  o.device_comm = f.get_string("device-comm");
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
