// Shared by the model tests: the small config they all use (several layers, GQA, a window
// shorter than the sequence, a vocabulary that is not a multiple of 64).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace vt::testing {

inline ModelConfig tiny_config(ValueMode mode, int seq_len = 32) {
  ModelConfig c;
  c.n_layer = 6;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.vocab_size = 251;
  c.seq_len = seq_len;
  c.short_window = 8;
  c.value_mode = mode;
  EXPECT_TRUE(c.finalize().ok());
  return c;
}

// Block shapes, their options, NeuTRENO and DenseFormer on the tiny config: one variant each
// of what the device, layout and decoding tests cover (sas/sas-p run without GQA).
struct Variant {
  std::string name;
  std::function<void(ModelConfig&)> apply;
  // Learning-rate scale of the device tests' step runner (which has no warmup): without norms
  // nothing rescales the stream, and a full first AdamW step of lr 0.5 on every gain (each moves
  // by ~lr whatever its gradient) multiplies it by ~1.5 per gain and layer until it overflows;
  // training warms up over 40 steps (first-step lr / 40), which this scale stands for.
  double lr_scale = 1.0;
};

inline std::vector<Variant> block_variants() {
  auto simplified = [](BlockShapeKind b) {
    return [b](ModelConfig& c) {
      c.block = b;
      c.n_kv_head = c.n_head;
    };
  };
  return {
      {"parallel", [](ModelConfig& c) { c.block = BlockShapeKind::kParallel; }},
      {"vskipinit_neutreno",
       [](ModelConfig& c) {
         c.block = BlockShapeKind::kVSkipInit;
         c.value_mode = ValueMode::kNeutreno;
       }},
      {"sas", simplified(BlockShapeKind::kSas)},
      {"sas_p_proj_gains",
       [=](ModelConfig& c) {
         simplified(BlockShapeKind::kSasP)(c);
         c.proj_gains = true;
       }},
      {"sas_p_espa",
       [=](ModelConfig& c) {
         simplified(BlockShapeKind::kSasP)(c);
         c.attn_bias = "espa";
       }},
      {"sas_nonorm_orth",
       [=](ModelConfig& c) {
         simplified(BlockShapeKind::kSas)(c);
         c.norm_none = true;
         c.reparam_init = "orth";
         c.reparam_seed = 9;
       },
       1.0 / 40},
      {"relu_mlp", [](ModelConfig& c) { c.mlp_act = "relu"; }},
      {"dense_bov",
       [](ModelConfig& c) {
         c.dense = true;
         c.dense_dilation = 2;
         c.dense_period = 2;
         c.value_mode = ValueMode::kBov;
       }},
      // nanochat compatibility (the BoV paper's baseline): the smear gate and S windows of
      // W + 1 keys, under x0v (which reads the smeared embedding).
      {"nanochat_smear_x0v",
       [](ModelConfig& c) {
         c.smear_gate = true;
         c.window_keys = "w+1";
         c.value_mode = ValueMode::kX0v;
       }},
  };
}

inline ModelConfig variant_config(const Variant& v, int seq_len = 32) {
  ModelConfig c = tiny_config(ValueMode::kBaseline, seq_len);
  v.apply(c);
  EXPECT_TRUE(c.finalize().ok()) << v.name;
  return c;
}

}  // namespace vt::testing
