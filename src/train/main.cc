// The vtrain command line: prepare, train, eval, generate, ckpt (DESIGN.md's CLI section).
// Every error reaches the user as one message and a non-zero exit, never a stack trace.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/h5_file.h"
#include "core/backend.h"
#include "core/flags.h"
#include "data/prepare.h"
#include "data/prepare_group.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pipeline.h"
#include "parallel/process_grid.h"
#include "eval/core_bundle.h"
#include "eval/core_eval.h"
#include "train/device_setup.h"
#include "train/evaluate.h"
#include "train/options.h"
#include "train/trainer.h"

namespace vt {
namespace {

namespace fs = std::filesystem;

const char* kUsage = R"(usage: vtrain <command> [options]
  prepare   --input FILES|DIR|GLOB|- --out DATADIR --tokenizer bytes|bpe:N|tiktoken:FILE ...
            (vtrain prepare --help; runs under mpirun too)
  train     --data DATADIR --preset tiny|d12|d24|d32 --value MODE ... (vtrain train --help)
  eval      --ckpt PATH [--data DATADIR] [--core BUNDLE_DIR] (vtrain eval --help; mpirun, any layout)
  generate  --ckpt PATH --prompt TEXT [--max-tokens N --temperature T --top-k K --seed S]
  ckpt      inspect|verify PATH
  devices   how many CUDA devices this build can use (exit 0 when at least one, 3 when none)
)";

struct LoadedModel {
  ModelConfig cfg;
  ParamStore store;
  std::unique_ptr<GPT> model;
  CheckpointMeta meta;
};

absl::StatusOr<std::unique_ptr<LoadedModel>> load_model(const std::string& ckpt) {
  auto m = std::make_unique<LoadedModel>();
  VT_ASSIGN_OR_RETURN(m->cfg, read_checkpoint_config(ckpt));
  VT_ASSIGN_OR_RETURN(m->meta, read_checkpoint_meta(ckpt));
  m->model = std::make_unique<GPT>(m->cfg);
  m->model->register_params(m->store);
  m->store.finalize();
  VT_RETURN_IF_ERROR(load_checkpoint_params(ckpt, m->store));
  return m;
}

// The tokenizer saved beside a checkpoint, else the one of the data directory it was trained on.
absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer_for(const std::string& ckpt,
                                                               const LoadedModel& m) {
  const fs::path beside = fs::path(ckpt).parent_path() / "tokenizer.json";
  if (fs::exists(beside)) return data::load_tokenizer(beside.string());
  const std::string data_dir = m.meta.extra.value("data_dir", "");
  if (!data_dir.empty() && fs::exists(data_dir)) return data::load_tokenizer(data_dir);
  return absl::NotFoundError(absl::StrCat("no tokenizer.json next to ", ckpt,
                                          " and the training data directory is gone"));
}

// `vtrain prepare`, on one process or split over an mpirun job (prepare.h). Only rank 0 prints
// an error (every rank returns the same one).
int cmd_prepare(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::printf("%s", data::prepare_usage().c_str());
      return 0;
    }
  absl::StatusOr<data::PrepareOptions> po = data::parse_prepare_args(args);
  if (!po.ok()) {
    std::fprintf(stderr, "vtrain prepare: error: %s\n", std::string(po.status().message()).c_str());
    return 2;
  }
  MpiSession mpi(&argc, &argv);
  std::unique_ptr<data::PrepareGroup> group =
      mpi.world_size() > 1 ? data::make_mpi_world_group() : data::make_single_group();
  const absl::Status st = data::prepare_data(*po, *group);
  if (!st.ok()) {
    std::fflush(stdout);
    if (mpi.world_rank() == 0)
      std::fprintf(stderr, "vtrain prepare: error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  return 0;
}

// `vtrain train` on one rank or under mpirun. Errors end every rank (failure.h: run_guarded);
// a stop signal that saved a checkpoint exits with kExitRequeue.
int cmd_train(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("%s", train_usage().c_str());
      return 0;
    }
  install_stop_signal_handlers();
  MpiSession mpi(&argc, &argv);
  MpiCommunicator world(MPI_COMM_WORLD);
  Communicator* comm = world.size() > 1 ? static_cast<Communicator*>(&world) : self_communicator();
  bool requeue = false;
  const int code = run_guarded([&]() -> absl::Status {
    auto o = parse_train_options(argc, argv, 2);
    if (!o.ok()) return agreed(o.status());  // every rank parses the same flags
    absl::Status st = run_train(*o, comm);
    if (absl::IsAborted(st)) {  // stopped by a signal after saving: resumable
      requeue = true;
      return absl::OkStatus();
    }
    return st;
  });
  return code == 0 && requeue ? kExitRequeue : code;
}

const char* kEvalUsage = R"(usage: vtrain eval --ckpt PATH [--data DATADIR] [--core BUNDLE_DIR] [options]
  --data DATADIR            validation loss and bits per byte on the val split (--tokens N, 262144;
                            --micro-batch B, 4)
  --core BUNDLE_DIR         the DCLM CORE score (nanochat's eval_bundle: core.yaml,
                            eval_meta_data.csv, eval_data/); --core-max-per-task N (default: all)
  --tp N --pp N             layout under mpirun (dp = ranks / (tp*pp)); any layout loads any
                            checkpoint
  --device cpu|cuda|emulated --act-dtype f32|bf16 --device-comm auto|nccl|mpi
The tokenizer is the one saved beside the checkpoint (or the --data directory's).
)";

// `vtrain eval`: validation loss and/or CORE, on one process or under mpirun on any layout and
// device (the training run's machinery: grid, device setup, checkpoint loading).
int cmd_eval(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("%s", kEvalUsage);
      return 0;
    }
  MpiSession mpi(&argc, &argv);
  MpiCommunicator world_comm(MPI_COMM_WORLD);
  Communicator* world = world_comm.size() > 1 ? static_cast<Communicator*>(&world_comm) : self_communicator();
  return run_guarded([&]() -> absl::Status {
    auto fl = Flags::parse(argc, argv, 2,
                           {"ckpt", "data", "tokens", "micro-batch", "core", "core-max-per-task", "tp",
                            "pp", "device", "act-dtype", "device-comm"},
                           {});
    if (!fl.ok()) return agreed(fl.status());
    const Flags& f = *fl;
    if (!f.has("ckpt") || (!f.has("data") && !f.has("core")))
      return agreed(absl::InvalidArgumentError(kEvalUsage));
    const std::string ckpt = f.get_string("ckpt");
    auto cfg_or = read_checkpoint_config(ckpt);
    if (!cfg_or.ok()) return agreed(cfg_or.status());
    auto meta_or = read_checkpoint_meta(ckpt);
    if (!meta_or.ok()) return agreed(meta_or.status());
    const ModelConfig cfg = *cfg_or;
    TrainOptions o;
    auto get_int = [&](const char* k, int64_t def) -> absl::StatusOr<int64_t> { return f.get_int(k, def); };
    VT_ASSIGN_OR_RETURN(int64_t tp, get_int("tp", 1));
    VT_ASSIGN_OR_RETURN(int64_t pp, get_int("pp", 1));
    o.tp = static_cast<int>(tp);
    o.pp = static_cast<int>(pp);
    o.device = f.get_string("device", "cpu");
    if (o.device != "cpu" && o.device != "cuda" && o.device != "emulated")
      return agreed(absl::InvalidArgumentError("--device must be cpu, cuda or emulated"));
    o.act_dtype = f.get_string("act-dtype", o.device == "cpu" ? "f32" : "bf16");
    if (o.act_dtype != "f32" && o.act_dtype != "bf16")
      return agreed(absl::InvalidArgumentError("--act-dtype must be f32 or bf16"));
    o.device_comm = f.get_string("device-comm", "auto");
    auto shape = make_grid_shape(world->size(), o.tp, o.pp, cfg);
    if (!shape.ok()) return agreed(shape.status());
    VT_ASSIGN_OR_RETURN(const DevicePlan device, setup_device(o, world));
    ProcessGrid grid(world, *shape);
    VT_ASSIGN_OR_RETURN(const std::string comm_desc, setup_device_comms(o, device, grid));
    auto [layer_begin, layer_end] = stage_layers(cfg.n_layer, shape->pp, grid.coords().pp);
    ModelParallel par;
    par.tp = grid.tp();
    par.layer_begin = layer_begin;
    par.layer_end = layer_end;
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
    std::unique_ptr<data::Tokenizer> tok;
    if (f.has("data")) {
      auto t = data::load_tokenizer(f.get_string("data"));
      if (!t.ok()) return agreed(t.status());
      tok = std::move(*t);
    } else {
      const fs::path beside = fs::path(ckpt).parent_path() / "tokenizer.json";
      const std::string data_dir = meta_or->extra.value("data_dir", "");
      auto t = fs::exists(beside) ? data::load_tokenizer(beside.string())
               : !data_dir.empty() && fs::exists(data_dir)
                   ? data::load_tokenizer(data_dir)
                   : absl::StatusOr<std::unique_ptr<data::Tokenizer>>(absl::NotFoundError(absl::StrCat(
                         "no tokenizer.json next to ", ckpt, " and the training data directory is gone")));
      if (!t.ok()) return agreed(t.status());
      tok = std::move(*t);
    }
    if (tok->vocab_size() != cfg.vocab_size)
      return agreed(absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer has ", tok->vocab_size(), " tokens, the checkpoint's model ", cfg.vocab_size)));
    if (rank0)
      std::printf("eval: %s (step %lld) | layout dp %d x tp %d x pp %d | %s | %s\n", ckpt.c_str(),
                  static_cast<long long>(meta_or->step), shape->dp, shape->tp, shape->pp,
                  device.description.c_str(), comm_desc.c_str());
    PipelineEngine engine(model, grid);
    if (f.has("data")) {
      VT_ASSIGN_OR_RETURN(int64_t tokens, get_int("tokens", 262144));
      VT_ASSIGN_OR_RETURN(int64_t B, get_int("micro-batch", 4));
      VT_ASSIGN_OR_RETURN(EvalResult r, evaluate(engine, grid, f.get_string("data"), static_cast<int>(B),
                                                 tokens, data::token_bytes_table(*tok)));
      if (rank0)
        std::printf("val loss %.4f | val bpb %.4f | %lld tokens | step %lld\n", r.loss, r.bpb,
                    static_cast<long long>(r.tokens), static_cast<long long>(meta_or->step));
    }
    if (f.has("core")) {
      VT_ASSIGN_OR_RETURN(int64_t max_per_task, get_int("core-max-per-task", -1));
      auto tasks = eval::load_core_bundle(f.get_string("core"), static_cast<int>(max_per_task));
      if (!tasks.ok()) return agreed(tasks.status());
      auto progress = [&](const std::string& line) {
        if (!rank0) return;
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      };
      VT_ASSIGN_OR_RETURN(eval::CoreResult r, eval::evaluate_core(model, grid, *tasks, *tok, progress));
      if (rank0) std::printf("CORE metric: %.4f (%zu tasks)\n", r.core, r.tasks.size());
    }
    std::fflush(stdout);
    return absl::OkStatus();
  });
}

absl::Status cmd_generate(int argc, char** argv) {
  VT_ASSIGN_OR_RETURN(Flags f, Flags::parse(argc, argv, 2,
                                            {"ckpt", "prompt", "max-tokens", "temperature", "top-k", "seed", "data"},
                                            {}));
  if (!f.has("ckpt"))
    return absl::InvalidArgumentError("usage: vtrain generate --ckpt PATH --prompt TEXT [--max-tokens N]");
  const std::string ckpt = f.get_string("ckpt");
  VT_ASSIGN_OR_RETURN(auto m, load_model(ckpt));
  std::unique_ptr<data::Tokenizer> tok;
  if (f.has("data")) {
    VT_ASSIGN_OR_RETURN(tok, data::load_tokenizer(f.get_string("data")));
  } else {
    VT_ASSIGN_OR_RETURN(tok, tokenizer_for(ckpt, *m));
  }
  SampleOptions so;
  VT_ASSIGN_OR_RETURN(int64_t max_tokens, f.get_int("max-tokens", 64));
  VT_ASSIGN_OR_RETURN(so.temperature, f.get_double("temperature", 0.8));
  VT_ASSIGN_OR_RETURN(int64_t top_k, f.get_int("top-k", 40));
  VT_ASSIGN_OR_RETURN(int64_t seed, f.get_int("seed", 0));
  so.max_tokens = static_cast<int>(max_tokens);
  so.top_k = static_cast<int>(top_k);
  so.seed = static_cast<uint64_t>(seed);
  const std::string prompt = f.get_string("prompt");
  std::vector<int32_t> ids = {tok->bos_id()};
  for (int32_t t : tok->encode(prompt)) ids.push_back(t);
  int64_t kv = 0, kv_base = 0;
  std::vector<int32_t> out = sample(*m->model, ids, so, &kv, &kv_base);
  VT_ASSIGN_OR_RETURN(std::string text, tok->decode(out));
  std::printf("%s%s\n", prompt.c_str(), text.c_str());
  std::fprintf(stderr, "kv-cache: %lld bytes/token (a standard K+V cache: %lld, %.1f%%)\n",
               static_cast<long long>(kv), static_cast<long long>(kv_base), 100.0 * kv / kv_base);
  return absl::OkStatus();
}

absl::Status cmd_ckpt(int argc, char** argv) {
  if (argc < 4 || (std::string(argv[2]) != "inspect" && std::string(argv[2]) != "verify"))
    return absl::InvalidArgumentError("usage: vtrain ckpt inspect|verify PATH");
  const std::string path = argv[3];
  if (std::string(argv[2]) == "inspect") {
    VT_ASSIGN_OR_RETURN(CheckpointInfo info, inspect_checkpoint(path));
    std::printf("%s", format_checkpoint_info(info).c_str());
    return absl::OkStatus();
  }
  VT_RETURN_IF_ERROR(verify_checkpoint(path));
  std::printf("%s: ok (every dataset matches its checksum)\n", path.c_str());
  return absl::OkStatus();
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  absl::Status st;
  if (cmd == "train") return cmd_train(argc, argv);
  if (cmd == "prepare") return cmd_prepare(argc, argv);
  if (cmd == "eval") return cmd_eval(argc, argv);
  if (cmd == "generate") st = cmd_generate(argc, argv);
  else if (cmd == "ckpt") st = cmd_ckpt(argc, argv);
  else if (cmd == "devices") {
    const int n = cuda_device_count_or_zero();
#if VTRAIN_HAS_CUDA
    std::printf("%d CUDA device(s) usable (vtrain built with CUDA)\n", n);
    for (const std::string& d : cuda_device_descriptions()) std::printf("  %s\n", d.c_str());
#else
    std::printf("0 CUDA devices usable (vtrain built without CUDA)\n");
#endif
    return n > 0 ? 0 : 3;
  }
  else st = absl::InvalidArgumentError(absl::StrCat("unknown command '", cmd, "'\n", kUsage));
  if (!st.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "vtrain %s: error: %s\n", cmd.c_str(), std::string(st.message()).c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace vt

int main(int argc, char** argv) { return vt::run(argc, argv); }
