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

using namespace vt;

static absl::Status run(int argc, char** argv) {
  VT_ASSIGN_OR_RETURN(Flags flags,
                      Flags::parse(argc, argv, 1,
                                   {"mode", "out", "layers", "dim", "heads", "kv-heads", "head-dim",
                                    "vocab", "seq-len", "window", "window-pattern", "batch",
                                    "value-layers", "seed", "block", "norm", "qk-norm",
                                    "reparam-init", "attn-bias", "dense-dilation", "dense-period",
                                    "neutreno-lambda", "perturb-scale"},
                                   {"detach-v1", "shared-table", "bov-add-fixed", "no-perturb",
                                    "dense"}));
  if (!flags.has("mode") || !flags.has("out"))
    return absl::InvalidArgumentError("usage: export_case --mode MODE --out FILE.h5 [options]");
  ModelConfig cfg;
  VT_ASSIGN_OR_RETURN(cfg.value_mode, parse_value_mode(flags.get_string("mode")));
  VT_ASSIGN_OR_RETURN(int64_t layers, flags.get_int("layers", 6));
  VT_ASSIGN_OR_RETURN(int64_t dim, flags.get_int("dim", 64));
  VT_ASSIGN_OR_RETURN(int64_t heads, flags.get_int("heads", 4));
  VT_ASSIGN_OR_RETURN(int64_t kv_heads, flags.get_int("kv-heads", 2));
  VT_ASSIGN_OR_RETURN(int64_t head_dim, flags.get_int("head-dim", 16));
  VT_ASSIGN_OR_RETURN(int64_t vocab, flags.get_int("vocab", 251));
  VT_ASSIGN_OR_RETURN(int64_t seq_len, flags.get_int("seq-len", 32));
  VT_ASSIGN_OR_RETURN(int64_t window, flags.get_int("window", 8));
  VT_ASSIGN_OR_RETURN(int64_t batch, flags.get_int("batch", 2));
  VT_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed", 1234));
  cfg.n_layer = layers;
  cfg.n_embd = dim;
  cfg.n_head = heads;
  cfg.n_kv_head = kv_heads;
  cfg.head_dim = head_dim;
  cfg.vocab_size = vocab;
  cfg.seq_len = seq_len;
  cfg.short_window = window;
  cfg.window_pattern = flags.get_string("window-pattern", "SSSL");
  cfg.value_layers = flags.get_string("value-layers", "default");
  cfg.detach_v1 = flags.get_bool("detach-v1");
  cfg.shared_table = flags.get_bool("shared-table");
  cfg.bov_add_fixed = flags.get_bool("bov-add-fixed");
  VT_ASSIGN_OR_RETURN(cfg.block, parse_block_shape(flags.get_string("block", "prenorm")));
  cfg.norm_none = flags.get_string("norm", "rms") == "none";
  if (flags.has("qk-norm")) cfg.qk_norm = flags.get_string("qk-norm") == "on" ? 1 : 0;
  cfg.reparam_init = flags.get_string("reparam-init", "");
  cfg.reparam_seed = static_cast<uint64_t>(seed);
  cfg.attn_bias = flags.get_string("attn-bias", "");
  cfg.dense = flags.get_bool("dense");
  VT_ASSIGN_OR_RETURN(int64_t dil, flags.get_int("dense-dilation", 1));
  VT_ASSIGN_OR_RETURN(int64_t per, flags.get_int("dense-period", 1));
  cfg.dense_dilation = static_cast<int>(dil);
  cfg.dense_period = static_cast<int>(per);
  VT_ASSIGN_OR_RETURN(cfg.neutreno_lambda, flags.get_double("neutreno-lambda", 0.4));
  VT_RETURN_IF_ERROR(cfg.finalize());

  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize();
  model.init_params(seed);
  VT_ASSIGN_OR_RETURN(const double perturb_scale, flags.get_double("perturb-scale", 1.0));
  if (!flags.get_bool("no-perturb")) {
    // Move every weight off its init: zero-initialized projections would otherwise make the
    // gradients of everything upstream of them exactly zero.
    Rng rng(seed ^ 0xabcdefULL);
    for (int i = 0; i < store.size(); ++i) {
      Tensor p = store.param(i);
      const bool is_scalar = store.info(i).group == ParamGroup::kScalar;
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
