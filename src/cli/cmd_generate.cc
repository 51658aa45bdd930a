// `vtrain generate`: text from a checkpoint, sampled through the KV cache of its value mode
// (model/decode.h), on one CPU process.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "core/arena.h"
#include "core/flags.h"
#include "model/gpt.h"
#include "train/evaluate.h"

namespace vt::cli {

namespace {

const CommandSpec& generate_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "vtrain generate";
    c.synopsis = "vtrain generate --ckpt PATH --prompt TEXT [options]";
    FlagSpec prompt = text_flag("prompt", "", "the text to continue (empty: from <|bos|> alone)");
    prompt.allow_empty = true;
    c.flags = {
        required(text_flag("ckpt", "", "the checkpoint (a step_*.h5 file)")),
        prompt,
        int_flag("max-tokens", 64, 1, 1 << 24,
                 "tokens to generate (at most the model's sequence length minus the prompt)"),
        num_flag("temperature", 0.8, 0, 1e3, "sampling temperature (0: greedy)"),
        int_flag("top-k", 40, 0, 1e9, "sample among the k most likely tokens (0: all)"),
        int_flag("seed", 0, 0, 9.2e18, "sampling seed"),
        text_flag("data", "", "take the tokenizer from this data directory"),
    };
    return c;
  }();
  return spec;
}

absl::Status generate(const Flags& f) {
  const std::string ckpt = f.get_string("ckpt");
  VT_ASSIGN_OR_RETURN(auto m, load_checkpoint_model(ckpt));
  VT_ASSIGN_OR_RETURN(auto tok, tokenizer_for_checkpoint(ckpt, m->meta.extra, f.get_string("data")));
  if (tok->vocab_size() != m->cfg.vocab_size)
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tok->vocab_size(),
                                                   " tokens, the checkpoint's model ", m->cfg.vocab_size));
  SampleOptions so;
  so.max_tokens = static_cast<int>(f.get_int("max-tokens"));
  so.temperature = f.get_double("temperature");
  so.top_k = static_cast<int>(f.get_int("top-k"));
  so.seed = static_cast<uint64_t>(f.get_int("seed"));
  const std::string prompt = f.get_string("prompt");
  std::vector<int32_t> ids = {tok->bos_id()};
  for (int32_t t : tok->encode(prompt)) ids.push_back(t);
  const int64_t room = m->cfg.seq_len - static_cast<int64_t>(ids.size());
  if (so.max_tokens > room)
    std::fprintf(stderr, "note: the model's context is %d tokens; generating %lld after a %zu-token prompt\n",
                 m->cfg.seq_len, static_cast<long long>(std::max<int64_t>(room, 1)), ids.size());
  int64_t kv = 0, kv_base = 0;
  std::vector<int32_t> out = sample(*m->model, ids, so, &kv, &kv_base);
  VT_ASSIGN_OR_RETURN(std::string text, tok->decode(out));
  std::printf("%s%s\n", prompt.c_str(), text.c_str());
  std::fprintf(stderr, "kv-cache: %lld bytes/token (a standard K+V cache: %lld, %.1f%%)\n",
               static_cast<long long>(kv), static_cast<long long>(kv_base), 100.0 * kv / kv_base);
  return absl::OkStatus();
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  if (wants_help(argc, argv, 2)) {
    std::printf("%s", usage(generate_command()).c_str());
    return 0;
  }
  absl::StatusOr<Flags> f = Flags::parse(generate_command(), argc, argv, 2);
  absl::Status st = f.ok() ? generate(*f) : f.status();
  if (!st.ok()) return report_error("generate", std::string(st.message()).c_str());
  return 0;
}

}  // namespace vt::cli
