// `vtrain eval`: validation loss and bits per byte and/or the CORE score of a checkpoint, on one
// process or under mpirun on any layout and device (the training run's machinery: grid, device
// setup, checkpoint loading).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/model_split.h"
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "cli/model_on_layout.h"
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
    };
    for (const FlagSpec& l : layout_flag_specs()) c.flags.push_back(l);
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
    std::vector<eval::CoreTask> core_tasks;
    if (f.has("core")) {
      auto tasks = eval::load_core_bundle(f.get_string("core"), static_cast<int>(f.get_int("core-max-per-task")));
      VT_RETURN_IF_ERROR(all_ok(world, tasks.status()));
      core_tasks = std::move(*tasks);
    }
    VT_ASSIGN_OR_RETURN(std::unique_ptr<ModelOnLayout> m, load_model_on_layout(f, world, "eval"));
    const bool rank0 = world->rank() == 0;
    PipelineEngine& engine = *m->engine;
    const ProcessGrid& grid = *m->grid;
    const data::Tokenizer* tok = m->tok.get();
    const GPT& model = *m->model;
    if (f.has("data")) {
      VT_ASSIGN_OR_RETURN(EvalResult r, evaluate(engine, grid, f.get_string("data"),
                                                 static_cast<int>(f.get_int("micro-batch")),
                                                 f.get_int("tokens"), data::token_bytes_table(*tok), "--tokens"));
      if (rank0)
        std::printf("val loss %.4f | val bpb %.4f | %lld tokens | step %lld\n", r.loss, r.bpb,
                    static_cast<long long>(r.tokens), static_cast<long long>(m->meta.step));
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
