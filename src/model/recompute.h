// Activation recomputation (--recompute; docs/design.md "Memory"): what a block keeps in forward
// for its backward, and what its backward reruns instead.
//   off    everything the forward saves (BlockActs)
//   attn   drops the attention core's outputs: softmax attention's output (and the mixed one),
//          its lse, and the QK-normed q and k; the backward reruns RoPE + QK-norm (one fused op)
//          and the attention forward from the kept q, k (before RoPE; after it without QK-norm)
//          and v, right before the attention backward
//   mlp    drops the MLP activation (relu^2 or relu of the pre-activation h); the backward reruns
//          it from h (one elementwise pass)
//   block  keeps only the block's input; the backward reruns the whole block forward, its
//          tensor-parallel communication included
// Same results as without: every rerun is deterministic.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vt {

enum class Recompute { kOff, kAttn, kMlp, kBlock };

const char* recompute_name(Recompute r);
// off, attn, mlp, block.
const std::vector<std::string>& recompute_names();
absl::StatusOr<Recompute> parse_recompute(std::string_view name);

}  // namespace vt
