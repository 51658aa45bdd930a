// The smear gate (--smear-gate on; docs/model.md "Base transformer"): nanochat's cheap bigram
// path, as the Bank of Values authors' baseline keeps it (RiddleHe/nanochat, branch
// research/bank_of_values, nanochat/model/gpt_base.py, GPTBase.forward "Smear"). After the
// normalized embedding x (B rows of T positions, width C), every position t >= 1 of a row adds a
// gated share of position t-1 of the same row; the first position of a row is unchanged:
//   y[t] = x[t] + lambda * sigmoid(x[t, :24] . w) * x[t-1]      (t >= 1),   y[0] = x[0]
// Parameters (first pipeline stage, replicated over TP; ParamGroup::kSmear, nanochat's own AdamW
// group): smear.gate_w (24, 1) ~ U(0, 0.02) and smear.lambda (1,) = 0, so the model starts as the
// plain network. Built from existing ops (GEMM, the value-embed gate ops, copies), so every
// backend runs it; the decoder's one-token form is decode_step().
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"

namespace vt {

class ParamRegistrar;

namespace smear {

inline constexpr int kChannels = 24;  // nanochat's Linear(24, 1)

struct Params {
  int gate_w = -1, lambda = -1;
  bool on() const { return gate_w >= 0; }
};

// What forward saves for backward.
struct Acts {
  Tensor x;     // the input (B, T, C), before smearing
  Tensor prev;  // x shifted by one position within each row (zeros at t = 0)
  Tensor g;     // sigmoid(x[:, :24] w), (B*T) f32
  Tensor ge;    // lambda * g, (B*T) f32
};

// Registers the two parameters (call on the first stage only, when the config asks for them).
Params register_params(ParamRegistrar& r);

// y = smear(x) for x (B, T, C) on the store's device, in the activation dtype.
Tensor forward(const ParamStore& store, const Params& p, int B, int T, const Tensor& x, Acts& a);
// Given dy = d loss / d y, returns d loss / d x and accumulates the parameters' gradients.
Tensor backward(const ParamStore& store, const Params& p, int B, int T, const Acts& a,
                const Tensor& dy);

// The decoder's form for one position on the host: x += lambda sigmoid(x[:24] w) prev, where
// prev is the previous position's normalized embedding (before its own smearing).
void decode_step(const ParamStore& store, const Params& p, float* x, const float* prev, int C);

}  // namespace smear
}  // namespace vt
