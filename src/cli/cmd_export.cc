// `vtrain export --ckpt PATH --out DIR`: a trained model in the files other tools load.
//   DIR/model.safetensors       every parameter by its global name (docs/model.md), fp32 or bf16,
//                               and the fixed W0 of reparameterized projections as
//                               fixed.blocks.I.attn.wv_base / wo_base (untrained buffers)
//   DIR/config.json             the model config (tests/reference/FORMAT.md keys) with
//                               "model_type": "vtrain", where it came from, and the
//                               "architectures" / "auto_map" of transformers' remote code
//   DIR/vtrain_tokenizer.json   the checkpoint's tokenizer in vtrain's own format (tokenizer.h)
//   DIR/tokenizer.json,         the same tokenizer for Hugging Face tokenizers / transformers
//   DIR/tokenizer_config.json   (data/hf_tokenizer.h): same ids, model_max_length = seq_len
//   DIR/modeling_vtrain.py      a PyTorch module of the model (bench/torch_model.py, embedded at
//                               build time): load_export(DIR), or (with transformers)
//                               AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True);
//                               `python modeling_vtrain.py DIR` checks it against
//                               export_check.safetensors
//   DIR/export_check.safetensors  "inputs" (1, N) int32 (<|bos|> and N-1 seeded ids) and
//                               "logits" (N, V) fp32: vtrain's soft-capped logits for them, for
//                               any loader to check itself against
// The checkpoint must verify first; --out is resolved and checked before anything is touched
// (never a checkpoint directory, nor inside or around one), one export per --out at a time, and
// everything is written into a staging folder beside DIR that replaces DIR only once complete
// (cli/export_out.h), so a failure or a kill leaves the old export or the new one whole. Every
// file is written by temporary file and rename with each write checked. One process.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/safetensors.h"
#include "cli/commands.h"
#include "cli/export_out.h"
#include "core/file_safety.h"
#include "core/dtype.h"
#include "core/flags.h"
#include "core/rng.h"
#include "data/hf_tokenizer.h"
#include "generated/torch_model_py.h"  // kTorchModelPy: bench/torch_model.py
#include "model/decode.h"
#include "model/projection.h"

namespace vt::cli {
namespace {
namespace fs = std::filesystem;

// vtrain's own tokenizer file in an export (tokenizer.json there is the Hugging Face one).
constexpr const char* kExportVtrainTokenizer = "vtrain_tokenizer.json";

const CommandSpec& export_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain export";
    c.synopsis = "vtrain export --ckpt PATH --out DIR [options]";
    c.flags = {
        required(text_flag("ckpt", "", "the checkpoint (a step_*.h5 file); it must verify")),
        required(text_flag("out", "", "the directory to write (must not exist, or --force)")),
        choice_flag("dtype", "f32", {"f32", "bf16"}, "the weights' type in model.safetensors"),
        int_flag("check-tokens", 64, 2, 1 << 20,
                 "tokens of export_check.safetensors (at most the model's sequence length; default 64 or that length)"),
        text_flag("data", "", "take the tokenizer from this data directory"),
        bool_flag("force", "replace --out if it exists"),
    };
    c.epilog =
        "Loading the export: docs/usage.md \"Exporting a model\" (safetensors with numpy or "
        "torch, the JAX reference's forward_logits, lm-evaluation-harness).\n";
    return c;
  }();
  return spec;
}

uint16_t to_bf16_bits(float x) {  // round to nearest even, as the engine's casts
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0x7F800000u) return static_cast<uint16_t>(u >> 16 | ((u & 0xFFFF) ? 0x40 : 0));
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

absl::Status write_export(const Flags& f, const std::string& ckpt, const fs::path& dir) {
  VT_ASSIGN_OR_RETURN(auto m, load_checkpoint_model(ckpt));
  VT_ASSIGN_OR_RETURN(auto tok, tokenizer_for_checkpoint(ckpt, m->meta.extra, f.get_string("data")));
  if (tok->vocab_size() != m->cfg.vocab_size)
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tok->vocab_size(),
                                                   " tokens, the checkpoint's model ", m->cfg.vocab_size));
  const int64_t N = f.has("check-tokens") ? f.get_int("check-tokens")
                                           : std::min<int64_t>(64, m->cfg.seq_len);
  if (N > m->cfg.seq_len)
    return absl::InvalidArgumentError(absl::StrCat("--check-tokens ", N, " is more than the model's ",
                                                   "sequence length ", m->cfg.seq_len));
  // The check first (decoding also builds the fixed W0 tensors the weights file holds): vtrain's logits for <|bos|> and N-1 seeded ids, through the decoder.
  std::vector<int32_t> ids = {static_cast<int32_t>(tok->bos_id())};
  Rng rng(20261126);
  while (static_cast<int64_t>(ids.size()) < N)
    ids.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(tok->bos_id())));
  Decoder dec(*m->model, static_cast<int>(N));
  std::vector<float> logits;
  for (int32_t t : ids) {
    const std::vector<float> row = dec.step(t);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  // The weights.
  const bool bf16 = f.get_string("dtype") == "bf16";
  std::vector<SafeTensor> tensors;
  std::vector<std::vector<uint16_t>> halves;
  halves.reserve(m->store.size() + 2 * m->cfg.n_layer);
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape, const float* p,
                 int64_t n) {
    if (!bf16) {
      tensors.push_back({name, "F32", shape, p});
      return;
    }
    halves.emplace_back(n);
    for (int64_t i = 0; i < n; ++i) halves.back()[i] = to_bf16_bits(p[i]);
    tensors.push_back({name, "BF16", shape, halves.back().data()});
  };
  for (int i = 0; i < m->store.size(); ++i) {
    const ParamInfo& info = m->store.info(i);
    std::vector<int64_t> shape(info.global_shape.begin(), info.global_shape.end());
    add(info.name, shape, m->store.param(i).f32(), m->store.param(i).numel());
  }
  for (int i = 0; i < m->cfg.n_layer; ++i) {
    const LayerParams& lp = m->model->layer_params(i);
    for (const Projection* p : {&lp.v, &lp.o}) {
      if (p->kind != Projection::Kind::kReparam) continue;
      add(absl::StrCat("fixed.blocks.", i, p == &lp.o ? ".attn.wo_base" : ".attn.wv_base"),
          {m->cfg.n_embd, m->cfg.n_embd}, p->base.f32(), p->base.numel());
    }
  }
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"vtrain_checkpoint", fs::path(ckpt).filename().string()},
      {"vtrain_step", std::to_string(m->meta.step)}};
  VT_RETURN_IF_ERROR(write_safetensors((dir / "model.safetensors").string(), tensors, meta));

  // The config.
  nlohmann::json cfg = m->cfg.to_json();
  cfg["model_type"] = "vtrain";
  cfg["architectures"] = {"VtrainForCausalLM"};
  // transformers' trust_remote_code loading: classes of modeling_vtrain.py (bench/torch_model.py).
  cfg["auto_map"] = {{"AutoConfig", "modeling_vtrain.VtrainConfig"},
                     {"AutoModelForCausalLM", "modeling_vtrain.VtrainForCausalLM"}};
  cfg["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  cfg["bos_token_id"] = tok->bos_id();
  cfg["vtrain_step"] = m->meta.step;
  cfg["vtrain_tokens"] = m->meta.tokens;
  VT_RETURN_IF_ERROR(write_output_file((dir / "config.json").string(), cfg.dump(1) + "\n", "the export's"));
  VT_RETURN_IF_ERROR(write_output_file((dir / "modeling_vtrain.py").string(), kTorchModelPy, "the export's"));
  VT_RETURN_IF_ERROR(tok->save((dir / kExportVtrainTokenizer).string()));
  VT_RETURN_IF_ERROR(data::write_hf_tokenizer(*tok, m->cfg.seq_len, dir.string()));

  const int64_t V = static_cast<int64_t>(logits.size()) / N;
  return write_safetensors((dir / "export_check.safetensors").string(),
                           {{"inputs", "I32", {1, N}, ids.data()},
                            {"logits", "F32", {N, V}, logits.data()}},
                           {{"what", "vtrain's soft-capped logits for inputs, one row per position"}});
}

absl::Status run_export(const Flags& f) {
  const std::string ckpt = f.get_string("ckpt");
  const std::string out = f.get_string("out");
  VT_ASSIGN_OR_RETURN(std::unique_ptr<ExportTarget> target,
                      ExportTarget::open(out, ckpt, f.get_bool("force")));
  std::string summary;
  if (absl::Status st = verify_checkpoint(ckpt, nullptr, &summary); !st.ok())
    return absl::Status(st.code(), absl::StrCat("--ckpt ", ckpt, " does not verify, nothing exported: ",
                                                st.message()));
  VT_RETURN_IF_ERROR(write_export(f, ckpt, target->staging()));
  VT_RETURN_IF_ERROR(target->install());
  std::printf("exported %s to %s: model.safetensors (%s), config.json, tokenizer.json, "
              "tokenizer_config.json, vtrain_tokenizer.json, modeling_vtrain.py, export_check.safetensors\n",
              ckpt.c_str(), out.c_str(), f.get_string("dtype").c_str());
  return absl::OkStatus();
}

}  // namespace

int cmd_export(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(export_command()).c_str());
    return 0;
  }
  absl::StatusOr<Flags> f = Flags::parse(export_command(), argc, argv, 2);
  if (!f.ok()) return report_error("export", std::string(f.status().message()).c_str());
  absl::Status st = run_export(*f);
  if (!st.ok()) return report_error("export", std::string(st.message()).c_str());
  return 0;
}

}  // namespace vt::cli
