// `vtrain diagnose`: over-smoothing diagnostics of a checkpoint (train/diagnose.h) on a prefix of
// a data directory's val split, on one process or under mpirun on any layout and device (the
// loading is `vtrain eval`'s): a per-layer table on stdout and optionally the same as JSON.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "cli/model_on_layout.h"
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
    };
    for (const FlagSpec& l : layout_flag_specs()) c.flags.push_back(l);
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
    // --out is checked before the pass (its folder exists; nothing but a regular file under
    // its name), not found wrong after it; written by temporary file and rename (file_safety.h).
    // It never lies among the data or the checkpoint's directory.
    if (f.has("out")) {
      const std::string out = f.get_string("out");
      // Built in one step: assigning "." to the string afterwards makes g++ 12 at -O3 warn
      // -Wrestrict (a false positive, GCC bug 105329).
      const std::string parent = std::filesystem::path(ckpt).parent_path().string();
      const std::string ckpt_dir = parent.empty() ? std::string(".") : parent;
      absl::Status st = check_output_file(out, "--out");
      if (st.ok())
        st = check_outside(out, "--out", {{f.get_string("data"), "--data"},
                                          {ckpt_dir, "--ckpt checkpoint's"}});
      VT_RETURN_IF_ERROR(all_ok(world, st));
    }
    VT_ASSIGN_OR_RETURN(std::unique_ptr<ModelOnLayout> m, load_model_on_layout(f, world, "diagnose"));
    const bool rank0 = world->rank() == 0;
    PipelineEngine& engine = *m->engine;
    const ProcessGrid& grid = *m->grid;
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
        j["step"] = m->meta.step;
        VT_RETURN_IF_ERROR(write_output_file(f.get_string("out"), j.dump(1) + "\n", "--out"));
        std::printf("wrote %s\n", f.get_string("out").c_str());
      }
    }
    std::fflush(stdout);
    return absl::OkStatus();
  });
}

}  // namespace vt::cli
