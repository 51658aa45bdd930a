// export_case: writes one reference-test case (tests/reference/FORMAT.md): a small model of the
// given value mode with every weight perturbed away from its init (so no gradient is trivially
// zero), random tokens, and vtrain's loss and gradients, for the JAX reference to check.
#include <cstdio>

#include "checkpoint/h5_file.h"
#include "core/arena.h"
#include "core/flags.h"
#include "core/rng.h"
#include "model/block_shape_kind.h"
#include "model/gpt.h"
#include "model/model_options.h"

using namespace vt;

static std::vector<std::string> block_names() {
  std::vector<std::string> names;
  for (BlockShapeKind s : all_block_shapes()) names.push_back(block_shape_name(s));
  return names;
}

static const CommandSpec& export_command() {
  static const CommandSpec spec = [] {
    CommandSpec c;
    c.name = "export_case";
    c.synopsis = "export_case --mode MODE --out FILE.h5 [options]";
    c.flags = {
        required(text_flag("mode", "", "value mode")),
        required(text_flag("out", "", "the case file to write")),
        int_flag("layers", 6, 1, 64, ""),
        int_flag("dim", 64, 1, 4096, ""),
        int_flag("heads", 4, 1, 64, ""),
        int_flag("kv-heads", 2, 1, 64, ""),
        int_flag("head-dim", 16, 2, 512, ""),
        int_flag("vocab", 251, 2, 1 << 20, ""),
        int_flag("seq-len", 32, 2, 4096, ""),
        int_flag("window", 8, 1, 4096, ""),
        text_flag("window-pattern", "SSSL", ""),
        int_flag("batch", 2, 1, 1024, ""),
        text_flag("value-layers", "default", ""),
        int_flag("seed", 1234, 0, 9.2e18, ""),
        bool_flag("no-perturb", "keep the weights at their init"),
        num_flag("perturb-scale", 1.0, 0, 100, "multiplies the perturbation amplitudes"),
        choice_flag("block", block_shape_name(ModelConfig{}.block), block_names(), ""),
        choice_flag("window-keys", "w", {"w", "w+1"}, ""),
        choice_flag("smear-gate", "off", {"on", "off"}, ""),
    };
    // The value modes' and block shapes' own options and the shared ones (model_options.h).
    for (const ModelOption& o : shared_value_options()) c.flags.push_back(o.flag);
    for (const DeclaredOption& d : value_mode_options()) c.flags.push_back(d.option.flag);
    for (const ModelOption& o : shared_block_options()) c.flags.push_back(o.flag);
    for (const DeclaredOption& d : block_shape_options()) c.flags.push_back(d.option.flag);
    for (const ModelOption& o : dense_options()) c.flags.push_back(o.flag);
    return c;
  }();
  return spec;
}

static absl::Status run(int argc, char** argv) {
  VT_ASSIGN_OR_RETURN(Flags flags, Flags::parse(export_command(), argc, argv, 1));
  if (flags.help_requested()) {
    std::printf("%s", usage(export_command()).c_str());
    return absl::OkStatus();
  }
  ModelConfig cfg;
  VT_ASSIGN_OR_RETURN(cfg.value_mode, parse_value_mode(flags.get_string("mode")));
  const int64_t layers = flags.get_int("layers"), dim = flags.get_int("dim"),
                heads = flags.get_int("heads"), kv_heads = flags.get_int("kv-heads"),
                head_dim = flags.get_int("head-dim"), vocab = flags.get_int("vocab"),
                seq_len = flags.get_int("seq-len"), window = flags.get_int("window"),
                batch = flags.get_int("batch"), seed = flags.get_int("seed");
  cfg.n_layer = layers;
  cfg.n_embd = dim;
  cfg.n_head = heads;
  cfg.n_kv_head = kv_heads;
  cfg.head_dim = head_dim;
  cfg.vocab_size = vocab;
  cfg.seq_len = seq_len;
  cfg.short_window = window;
  cfg.window_pattern = flags.get_string("window-pattern");
  cfg.value_layers = flags.get_string("value-layers");
  cfg.window_keys = flags.get_string("window-keys");
  cfg.smear_gate = flags.get_string("smear-gate") == "on";
  VT_ASSIGN_OR_RETURN(cfg.block, parse_block_shape(flags.get_string("block")));
  cfg.reparam_seed = static_cast<uint64_t>(seed);
  VT_RETURN_IF_ERROR(apply_model_options(flags, cfg));
  VT_RETURN_IF_ERROR(cfg.finalize());

  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize();
  model.init_params(seed);
  const double perturb_scale = flags.get_double("perturb-scale");
  if (!flags.get_bool("no-perturb")) {
    // Move every weight off its init: zero-initialized projections would otherwise make the
    // gradients of everything upstream of them exactly zero.
    Rng rng(seed ^ 0xabcdefULL);
    for (int i = 0; i < store.size(); ++i) {
      Tensor p = store.param(i);
      const bool is_scalar = store.info(i).group == ParamGroup::kScalar ||
                             store.info(i).group == ParamGroup::kSmear;
      const double amp = (is_scalar ? 0.2 : 0.05) * perturb_scale;
      for (int64_t j = 0; j < p.numel(); ++j) p.f32()[j] += static_cast<float>(rng.normal(0, amp));
    }
  }
  const int64_t N = batch * seq_len;
  std::vector<int32_t> inputs(N), targets(N);
  Rng tok(seed + 7);
  for (int64_t n = 0; n < N; ++n) {
    inputs[n] = static_cast<int32_t>(tok.next_u64() % vocab);
    targets[n] = static_cast<int32_t>(tok.next_u64() % vocab);
  }
  store.zero_grads();
  const double loss_sum =
      model.forward_backward(inputs.data(), targets.data(), batch, 1.0f / N, true);
  const double loss = loss_sum / N;

  VT_ASSIGN_OR_RETURN(h5::File f, h5::File::create(flags.get_string("out")));
  VT_RETURN_IF_ERROR(f.set_attr("config", cfg.to_json().dump()));
  VT_RETURN_IF_ERROR(f.write_i32("/inputs", {batch, seq_len}, inputs.data()));
  VT_RETURN_IF_ERROR(f.write_i32("/targets", {batch, seq_len}, targets.data()));
  VT_RETURN_IF_ERROR(f.write_f64("/loss", {}, &loss));
  for (int i = 0; i < store.size(); ++i) {
    const ParamInfo& info = store.info(i);
    VT_RETURN_IF_ERROR(f.write_f32("/params/" + info.name, info.global_shape, store.param(i).f32()));
    VT_RETURN_IF_ERROR(f.write_f32("/grads/" + info.name, info.global_shape, store.grad(i).f32()));
  }
  // Fixed (untrained) tensors the reference cannot draw itself: the W0 of reparameterized
  // projections (an orthogonal draw under --reparam-init orth).
  for (int i = 0; i < cfg.n_layer; ++i) {
    const LayerParams& lp = model.layer_params(i);
    for (const Projection* p : {&lp.v, &lp.o}) {
      if (p->kind != Projection::Kind::kReparam) continue;
      const std::string name = "blocks." + std::to_string(i) + (p == &lp.o ? ".attn.wo_base" : ".attn.wv_base");
      VT_RETURN_IF_ERROR(f.write_f32("/fixed/" + name, {cfg.n_embd, cfg.n_embd}, p->base.f32()));
    }
  }
  std::printf("%s: loss %.6f, %d parameters\n", flags.get_string("mode").c_str(), loss, store.size());
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  absl::Status st = run(argc, argv);
  if (!st.ok()) {
    std::fprintf(stderr, "export_case: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  return 0;
}
