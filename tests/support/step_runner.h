// Shared by the device tests (emulated and real GPU): trains a small model on one process on a
// chosen device and activation dtype, on fixed batches with a learnable pattern, and returns
// what the tests compare against the CPU backend: the losses of every step, the gradients of
// the first step and the parameters at the end (host copies, fp32).
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/gpt.h"
#include "optim/distributed_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/process_grid.h"

namespace vt::testing {

struct StepRun {
  std::vector<double> losses;          // mean loss of each step (before its update)
  std::vector<float> first_grads;      // the whole gradient arena after step 1's backward
  std::vector<std::vector<float>> step_grads;  // the arena after each step's backward
  std::vector<float> final_params;     // the whole parameter arena after the last update
  std::vector<std::string> names;      // parameter names, for messages
  std::vector<int64_t> offsets;        // their arena offsets
};

// Token rows following a fixed random cycle of `period` tokens (so the next token is a function
// of the previous ones and the loss can fall), starting at different phases per row and step.
inline void pattern_batch(const ModelConfig& cfg, int B, int step, std::vector<int32_t>& in,
                          std::vector<int32_t>& tg, int period = 13) {
  std::vector<int32_t> cycle(period);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < period; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    cycle[i] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(cfg.vocab_size));
  }
  const int T = cfg.seq_len;
  in.resize(static_cast<size_t>(B) * T);
  tg.resize(in.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int phase = (b * 5 + step * 3 + t) % period;
      in[b * T + t] = cycle[phase];
      tg[b * T + t] = cycle[(phase + 1) % period];
    }
}

// perturb > 0 moves every parameter off its init by N(0, perturb) (scalars and gains by
// N(0, 4 perturb)), the same numbers on every device: at init some gradients vanish in exact
// arithmetic (scale-invariant gains in front of a norm, W_O = 0), and comparing their rounding
// noise between backends tests nothing. fp8: the blocks' linear GEMMs in FP8 (--fp8 e4m3).
// accum micro-batches of B rows a step (each its own rows). defer_zeroing: the trainer's
// gradient zeroing (ParamStore::set_overwrite_first with GPT::gemm_written_grads, then
// begin_gradients / zero_unwritten each step) instead of zero_grads.
inline StepRun run_steps(const ModelConfig& cfg, Device device, DType act, int steps, int B,
                         uint64_t seed = 1234, double lr_scale = 1.0, double perturb = 0.0,
                         bool fp8 = false, int accum = 1, bool defer_zeroing = false) {
  StepRun r;
  ParamStore store;
  GPT model(cfg);
  model.set_fp8(fp8);
  model.register_params(store);
  store.finalize(device, act);
  model.init_params(seed);
  if (perturb > 0) {
    std::vector<float> host = store.params_tensor().to_host_f32();
    Rng rng(seed ^ 0x5eedULL);
    for (const ParamInfo& p : store.infos()) {
      const bool coef = p.group == ParamGroup::kScalar || p.group == ParamGroup::kCoefMain ||
                        p.group == ParamGroup::kCoefSkip || p.group == ParamGroup::kCoefModel;
      const double amp = coef ? 4 * perturb : perturb;
      for (int64_t i = 0; i < p.numel(); ++i)
        host[p.offset + i] += static_cast<float>(rng.normal(0.0, amp));
    }
    store.params_tensor().copy_from(Tensor::view(host.data(), {store.total_numel()}));
    store.refresh_compute_copy();
  }
  ProcessGrid grid(self_communicator(), GridShape{});
  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.muon.lr *= lr_scale;
  for (optim::AdamWHyper* h : {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table,
                               &oc.adamw.scalar, &oc.adamw.coef_main, &oc.adamw.coef_skip,
                               &oc.adamw.coef_model})
    h->lr *= lr_scale;
  oc.schedule.warmup_steps = 0;
  optim::DistributedOptimizer opt(&store, oc, grid);
  if (defer_zeroing) store.set_overwrite_first(model.gemm_written_grads());
  std::vector<int32_t> in, tg;
  const double tokens = static_cast<double>(B) * cfg.seq_len * accum;
  for (int step = 0; step < steps; ++step) {
    if (defer_zeroing)
      store.begin_gradients();
    else
      store.zero_grads();
    double loss_sum = 0;
    for (int m = 0; m < accum; ++m) {
      pattern_batch(cfg, B, step * accum + m, in, tg);
      loss_sum += model.forward_backward(in.data(), tg.data(), B, static_cast<float>(1.0 / tokens));
    }
    if (defer_zeroing) store.zero_unwritten();
    r.losses.push_back(loss_sum / tokens);
    r.step_grads.push_back(store.grads_tensor().to_host_f32());
    if (step == 0) r.first_grads = r.step_grads.back();
    opt.step(step, steps);
  }
  r.final_params = store.params_tensor().to_host_f32();
  for (const ParamInfo& p : store.infos()) {
    r.names.push_back(p.name);
    r.offsets.push_back(p.offset);
  }
  return r;
}

// Name of the parameter holding arena element `i`.
inline std::string param_at(const StepRun& r, int64_t i) {
  std::string name = "?";
  for (size_t k = 0; k < r.offsets.size(); ++k)
    if (r.offsets[k] <= i) name = r.names[k];
  return name;
}

}  // namespace vt::testing
