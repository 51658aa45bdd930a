// `vtrain eval`: validation loss and bits per byte and/or the CORE score of a checkpoint, on one
// process or under mpirun on any layout and device (the training run's machinery: grid, device
// setup, checkpoint loading).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/model_split.h"
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "core/arena.h"
#include "core/flags.h"
#include "eval/core_bundle.h"
#include "eval/core_eval.h"
#include "model/gpt.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "pipeline/pipeline.h"
#include "parallel/process_grid.h"
#include "train/device_setup.h"
#include "train/evaluate.h"
#include "train/options.h"

namespace vt::cli {

namespace {

const CommandSpec& eval_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain eval";
    c.synopsis = "vtrain eval --ckpt PATH (--data DATADIR | --core BUNDLE_DIR) [options]";
    c.flags = {
        required(text_flag("ckpt", "", "the checkpoint (a step_*.h5 file)")),
        text_flag("data", "", "validation loss and bits per byte on this data directory's val split"),
        int_flag("tokens", 262144, 1, 1e12, "validation tokens (whole batches of them)"),
        int_flag("micro-batch", 4, 1, 1 << 24, "rows per forward pass"),
        text_flag("core", "", "the DCLM CORE score (nanochat's eval_bundle: core.yaml, "
                              "eval_meta_data.csv, eval_data/)"),
        int_flag("core-max-per-task", -1, -1, 1e9, "CORE examples per task (-1: all)"),
        flag_heading("layout and device"),
        int_flag("tp", 1, 1, 1 << 20, "tensor-parallel ranks (dp = ranks / (tp*pp))"),
        int_flag("pp", 1, 1, 1 << 20, "pipeline stages; any layout loads any checkpoint"),
        int_flag("vpp", 1, 1, 1 << 20,
                 "model chunks per pipeline rank (the interleaved layout of `train --vpp`)"),
        choice_flag("device", "cpu", {"cpu", "cuda", "emulated"}, "where the model runs"),
        choice_flag("act-dtype", "", {"f32", "bf16"}, "activations (default bf16 off the CPU)"),
        choice_flag("device-comm", "auto", {"auto", "nccl", "mpi"}, "how device tensors cross ranks"),
    };
    c.epilog = "The tokenizer is the --data directory's, else the one saved beside the checkpoint.\n";
    return c;
  }();
  return spec;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(eval_command()).c_str());
    return 0;
  }
  MpiSession mpi(&argc, &argv);
  MpiCommunicator world_comm(MPI_COMM_WORLD);
  Communicator* world = world_comm.size() > 1 ? static_cast<Communicator*>(&world_comm) : self_communicator();
  return run_guarded([&]() -> absl::Status {
    // Each rank parses its own command line and reads its own files: all_ok agrees on the first
    // failing rank's error, so any rank's error ends every rank with its message (a file missing
    // on one node must not leave the others waiting in a collective).
    auto fl = Flags::parse(eval_command(), argc, argv, 2);
    VT_RETURN_IF_ERROR(all_ok(world, fl.status()));
    const Flags& f = *fl;
    VT_RETURN_IF_ERROR(all_ok(world, !f.has("data") && !f.has("core")
        ? absl::InvalidArgumentError(
              "nothing to evaluate: give --data DATADIR (validation loss) and/or --core BUNDLE_DIR")
        : absl::OkStatus()));
    const std::string ckpt = f.get_string("ckpt");
    auto cfg_or = read_checkpoint_config(ckpt);
    VT_RETURN_IF_ERROR(all_ok(world, cfg_or.status()));
    auto meta_or = read_checkpoint_meta(ckpt);
    VT_RETURN_IF_ERROR(all_ok(world, meta_or.status()));
    const ModelConfig cfg = *cfg_or;
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
    auto tok_or = tokenizer_for_checkpoint(ckpt, meta_or->extra, f.get_string("data"));
    VT_RETURN_IF_ERROR(all_ok(world, tok_or.status()));
    std::unique_ptr<data::Tokenizer> tok = std::move(*tok_or);
    if (tok->vocab_size() != cfg.vocab_size)
      return agreed(absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer has ", tok->vocab_size(), " tokens, the checkpoint's model ", cfg.vocab_size)));
    std::vector<eval::CoreTask> core_tasks;
    if (f.has("core")) {
      auto tasks = eval::load_core_bundle(f.get_string("core"), static_cast<int>(f.get_int("core-max-per-task")));
      VT_RETURN_IF_ERROR(all_ok(world, tasks.status()));
      core_tasks = std::move(*tasks);
    }
    VT_ASSIGN_OR_RETURN(const DevicePlan device, setup_device(o, world));
    ProcessGrid grid(world, *shape);
    VT_ASSIGN_OR_RETURN(const std::string comm_desc, setup_device_comms(o, device, grid));
    auto [layer_begin, layer_end] = stage_layers(cfg.n_layer, shape->pp, grid.coords().pp);
    ModelParallel par;
    par.tp = grid.tp();
    par.layer_begin = layer_begin;
    par.layer_end = layer_end;
    if (o.vpp > 1) par.chunks = virtual_stage_layers(cfg.n_layer, shape->pp, o.vpp, grid.coords().pp);
    ParamStore store;
    GPT model(cfg, par);
    model.register_params(store);
    store.finalize(device.device, device.act_dtype);
    {
      ParamStore host = store.device() == Device::kCPU ? store : store.host_mirror();
      VT_RETURN_IF_ERROR(load_checkpoint_params(ckpt, host, world->size() > 1 ? &grid : nullptr));
      if (store.device() != Device::kCPU) store.copy_params_from(host);
      store.refresh_compute_copy();
    }
    const bool rank0 = world->rank() == 0;
    if (rank0)
      std::printf("eval: %s (step %lld) | layout dp %d x tp %d x pp %d%s | %s | %s\n", ckpt.c_str(),
                  static_cast<long long>(meta_or->step), shape->dp, shape->tp, shape->pp,
                  o.vpp > 1 ? absl::StrCat(" x vpp ", o.vpp).c_str() : "",
                  device.description.c_str(), comm_desc.c_str());
    PipelineEngine engine(model, grid);
    if (f.has("data")) {
      VT_ASSIGN_OR_RETURN(EvalResult r, evaluate(engine, grid, f.get_string("data"),
                                                 static_cast<int>(f.get_int("micro-batch")),
                                                 f.get_int("tokens"), data::token_bytes_table(*tok), "--tokens"));
      if (rank0)
        std::printf("val loss %.4f | val bpb %.4f | %lld tokens | step %lld\n", r.loss, r.bpb,
                    static_cast<long long>(r.tokens), static_cast<long long>(meta_or->step));
    }
    if (f.has("core")) {
      auto progress = [&](const std::string& line) {
        if (!rank0) return;
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      };
      VT_ASSIGN_OR_RETURN(eval::CoreResult r, eval::evaluate_core(model, grid, core_tasks, *tok, progress));
      if (rank0) std::printf("CORE metric: %.4f (%zu tasks)\n", r.core, r.tasks.size());
    }
    std::fflush(stdout);
    return absl::OkStatus();
  });
}

}  // namespace vt::cli
