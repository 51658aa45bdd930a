// The vtrain binary: dispatches to the commands of src/cli/ (docs/design.md, "CLI"). Every error
// reaches the user as one message and a non-zero exit, never a stack trace.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/host_allocator.h"
#include "core/openmp_wait.h"

namespace {

const char* kUsage = R"(usage: vtrain <command> [options]     (vtrain <command> --help for each)
  prepare   --input FILES|DIR|GLOB|- --out DATADIR --tokenizer bytes|bpe:N|tiktoken:FILE ...
            (runs under mpirun too)
  train     --data DATADIR --preset tiny|d12|d24|d32 --value MODE ... (mpirun: dp x tp x pp)
  eval      --ckpt PATH [--data DATADIR] [--core BUNDLE_DIR] (mpirun, any layout)
  diagnose  --ckpt PATH --data DATADIR [--tokens N] [--out FILE.json]: per-layer token
            similarity, attention entropy, V1 share (mpirun, any layout)
  generate  --ckpt PATH --prompt TEXT [--max-tokens N --temperature T --top-k K --seed S]
  ckpt      inspect|verify PATH
  devices   the CUDA devices this build can use (exit 0 when at least one, 3 when none)
  plan      --preset d32 --tokens 200e9 --gpus 64 --gpu h100: layouts that fit, memory, days
  export    --ckpt PATH --out DIR: safetensors weights, config.json, tokenizer, a logits check
)";

}  // namespace

int main(int argc, char** argv) {
  vt::shorten_openmp_spin(argv);  // may execute vtrain again, with GOMP_SPINCOUNT set
  vt::tune_host_allocator();
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "train") return vt::cli::cmd_train(argc, argv);
  if (cmd == "prepare") return vt::cli::cmd_prepare(argc, argv);
  if (cmd == "eval") return vt::cli::cmd_eval(argc, argv);
  if (cmd == "diagnose") return vt::cli::cmd_diagnose(argc, argv);
  if (cmd == "generate") return vt::cli::cmd_generate(argc, argv);
  if (cmd == "ckpt") return vt::cli::cmd_ckpt(argc, argv);
  if (cmd == "devices") return vt::cli::cmd_devices(argc, argv);
  if (cmd == "plan") return vt::cli::cmd_plan(argc, argv);
  if (cmd == "export") return vt::cli::cmd_export(argc, argv);
  std::fprintf(stderr, "vtrain: error: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
