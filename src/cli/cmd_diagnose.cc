// `vtrain diagnose`: over-smoothing diagnostics of a checkpoint (train/diagnose.h) on a prefix of
// a data directory's val split, on one process or under mpirun on any layout and device (the
// loading is `vtrain eval`'s): a per-layer table on stdout and optionally the same as JSON.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "core/arena.h"
#include "core/file_safety.h"
#include "core/flags.h"
#include "train/diagnose.h"
#include "model/gpt.h"
#include "model/model_split.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"
#include "pipeline/pipeline.h"
#include "train/device_setup.h"
#include "train/options.h"

namespace vt::cli {

namespace {

const CommandSpec& diagnose_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain diagnose";
    c.synopsis = "vtrain diagnose --ckpt PATH --data DATADIR [--tokens N] [--out FILE.json] [options]";
    c.flags = {
        required(text_flag("ckpt", "", "the checkpoint (a step_*.h5 file)")),
        required(text_flag("data", "", "the data directory whose val split is read")),
        int_flag("tokens", 16384, 1, 1e12, "val tokens to read, at most (whole batches of sequences)"),
        int_flag("micro-batch", 4, 1, 1 << 24, "rows per forward pass"),
        text_flag("out", "", "also write the numbers as JSON to this file"),
        flag_heading("layout and device"),
        int_flag("tp", 1, 1, 1 << 20, "tensor-parallel ranks (dp = ranks / (tp*pp))"),
        int_flag("pp", 1, 1, 1 << 20, "pipeline stages; any layout loads any checkpoint"),
        int_flag("vpp", 1, 1, 1 << 20,
                 "model chunks per pipeline rank (the interleaved layout of `train --vpp`)"),
        choice_flag("device", "cpu", {"cpu", "cuda", "emulated"}, "where the model runs"),
        choice_flag("act-dtype", "", {"f32", "bf16"}, "activations (default bf16 off the CPU)"),
        choice_flag("device-comm", "auto", {"auto", "nccl", "mpi"}, "how device tensors cross ranks"),
    };
    c.epilog =
        "Per layer: the mean cosine similarity between the token representations of a sequence\n"
        "(the residual stream after the block; all ordered pairs of distinct positions), the mean\n"
        "entropy of a query's attention distribution per head (over the keys of its window;\n"
        "`uniform`: its value for uniform attention, the most it can be), the entropy of the\n"
        "attention each key receives over heads and queries (importance), and the share of V1 /\n"
        "value-table / x0 signal in a target layer's value (\"-\": no such term). Definitions:\n"
        "docs/model.md \"Over-smoothing diagnostics\".\n";
    return c;
  }();
  return spec;
}

}  // namespace

int cmd_diagnose(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(diagnose_command()).c_str());
    return 0;
  }
  MpiSession mpi(&argc, &argv);
  MpiCommunicator world_comm(MPI_COMM_WORLD);
  Communicator* world = world_comm.size() > 1 ? static_cast<Communicator*>(&world_comm) : self_communicator();
  return run_guarded([&]() -> absl::Status {
    auto fl = Flags::parse(diagnose_command(), argc, argv, 2);
    VT_RETURN_IF_ERROR(all_ok(world, fl.status()));
    const Flags& f = *fl;
    const std::string ckpt = f.get_string("ckpt");
    // The JSON's folder must exist before the pass, not be found missing after it.
    if (f.has("out")) {
      const std::filesystem::path dir = std::filesystem::path(f.get_string("out")).parent_path();
      std::error_code ec;
      VT_RETURN_IF_ERROR(all_ok(world, !dir.empty() && !std::filesystem::is_directory(dir, ec)
          ? absl::InvalidArgumentError(absl::StrCat("--out ", f.get_string("out"), ": the folder ",
                                                    dir.string(), " does not exist"))
          : absl::OkStatus()));
    }
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
    // The data must be in the checkpoint's vocabulary (the same check as `vtrain eval`).
    auto tok_or = tokenizer_for_checkpoint(ckpt, meta_or->extra, f.get_string("data"));
    VT_RETURN_IF_ERROR(all_ok(world, tok_or.status()));
    if ((*tok_or)->vocab_size() != cfg.vocab_size)
      return agreed(absl::InvalidArgumentError(absl::StrCat(
          "--data ", f.get_string("data"), ": its tokenizer has ", (*tok_or)->vocab_size(),
          " tokens, the checkpoint's model ", cfg.vocab_size)));
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
      std::printf("diagnose: %s (step %lld) | layout dp %d x tp %d x pp %d%s | %s | %s\n", ckpt.c_str(),
                  static_cast<long long>(meta_or->step), shape->dp, shape->tp, shape->pp,
                  o.vpp > 1 ? absl::StrCat(" x vpp ", o.vpp).c_str() : "",
                  device.description.c_str(), comm_desc.c_str());
    PipelineEngine engine(model, grid);
    VT_ASSIGN_OR_RETURN(Diagnosis d,
                        diagnose(engine, grid, f.get_string("data"),
                                       static_cast<int>(f.get_int("micro-batch")), f.get_int("tokens")));
    if (rank0) {
      std::printf("value mode %s | %lld sequences of %lld tokens\n%s", d.value_mode.c_str(),
                  static_cast<long long>(d.sequences), static_cast<long long>(d.seq_len),
                  diagnosis_table(d).c_str());
      if (f.has("out")) {
        nlohmann::json j = diagnosis_json(d);
        j["ckpt"] = ckpt;
        j["step"] = meta_or->step;
        absl::Status st = replace_file(f.get_string("out"), j.dump(1) + "\n", "--out");
        if (!st.ok()) return st;
        std::printf("wrote %s\n", f.get_string("out").c_str());
      }
    }
    std::fflush(stdout);
    return absl::OkStatus();
  });
}

}  // namespace vt::cli
